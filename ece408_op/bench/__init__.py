"""The benchmarks wing: every measurement of the project (``python -m ece408_op bench ...``), timed one way
(``timing.py``). The GPU ones need PyTorch (cuDNN is the baseline) and PyCUDA, never MXNet.

    timing.py      CUDA events, interleaved entries, L2 flush, medians; the host clock's turns
    gpu.py         every kernel version against cuDNN and the memory floor     (bench gpu)
    sweep.py       v7's tuning sweep -> kernels/tuning.json                     (bench gpu --sweep)
    suite.py       every layer and batch, ratio tables, plots -> defaults.json  (bench gpu --suite)
    tiles.py       the versions' tile sweep                                     (bench gpu --suite --tiles)
    coursemap.py   the course's optimisation list: v14-v19, ECE408_STREAMS      (bench gpu --course-map)
    network_layers.py  real networks' convolutions through ece408_op.torch, layer by layer; the hot path,
                   the autotuner's check                                        (bench gpu --network)
    whole_networks.py  whole networks: cold start, steady state, torch.compile  (bench gpu --network)
    precompile.py  every module they load, built without a GPU                  (bench gpu --precompile)
    hgmma.py       TFLOP/s per layer of ResNet-50 and VGG-16 in half precision: v23, v21, the choice, cuDNN
                   (python -m ece408_op.bench.hgmma --json FILE)
    ncu.py         Nsight Compute over a command                                (m3 --ncu)
    memory.py      the host link and fresh host memory                          (bench memory, --profile)
    cpu.py         ece408_conv (CPU) against MXNet's built-in; a call's fixed cost (bench cpu, overhead)
    zoo.py         the model zoo, original against swapped                      (bench zoo)

cpu.py and zoo.py import MXNet, network_layers.py PyTorch, when they are imported; the others import neither
until they run.
"""

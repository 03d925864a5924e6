"""Host arrays in and out of the GPU (MXNet's CPU build: its arrays are host memory), by job:

    engine.py       the copy engine: ``forward_into`` (modes ring, registered, direct)
    streams.py      ``ECE408_STREAMS=N``: the batch in chunks, copies overlapping kernels
    records.py      what each call took (``--profile``'s breakdown)
    host_memory.py  host memory, no CUDA: thread pools, faulting pages in, parallel copies

Import the module that does the job (``from ece408_op.kernels.hostcopy.engine import forward_into``).
"""

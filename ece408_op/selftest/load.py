"""Load figures: many inferences in one process (memory before/after) and several threads
each running its own executor (results identical to a single-threaded run).

The network is the shipped ``ece408-high`` with ``ece408_conv`` swapped in (CPU or GPU path),
on a batch of the first test images where Fashion-MNIST is found (else random images: the
figures are about memory and threads, not accuracy).
"""
import os
import threading
import time

import numpy as np

from ..errors import Ece408Error


def host_rss_mib():
    """This process's resident set size (MiB), from /proc (Linux) or getrusage's peak elsewhere."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    except OSError:
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Network:
    """The model bound for one batch on one path; ``infer()`` returns the softmax output."""

    def __init__(self, device, batch, model="ece408-high"):
        from .. import require_mxnet
        self.mx = require_mxnet()
        from ..mx.inference import bind_model, prepare
        from ..mx.models import load_model
        self.images, self.labels, self.data_note = _batch(batch)
        _, symbol, arg_params, aux_params = load_model(model)
        self._bind = lambda: bind_model(prepare(symbol, True, device), arg_params, aux_params, len(self.images))

    def executor(self):
        return self._bind()

    def infer(self, module):
        mx = self.mx
        module.forward(mx.io.DataBatch([mx.nd.array(self.images)], [mx.nd.array(self.labels)]), is_train=False)
        return module.get_outputs()[0].asnumpy()


def _batch(count):
    from ..data import load_fashion_mnist
    try:
        images, labels = load_fashion_mnist("test", count)
        note = f"the first {count} Fashion-MNIST test images"
    except Ece408Error:
        rng = np.random.default_rng(408)
        images, labels = rng.integers(0, 256, (count, 28, 28), dtype=np.uint8), np.arange(count) % 10
        note = f"{count} random 28x28 images (no Fashion-MNIST found)"
    return images.astype(np.float32).reshape(-1, 1, 28, 28), labels.astype(np.float32), note


def repeated_inferences(network, count, device_memory=None):
    """``count`` inferences with one executor: memory before (after 10 warm-up runs) and after,
    and whether every output equals the first."""
    module = network.executor()
    reference = network.infer(module)
    for _ in range(10):
        network.infer(module)
    before, device_before = host_rss_mib(), device_memory() if device_memory else None
    start = time.perf_counter()
    identical = 0
    for _ in range(count):
        identical += bool(np.array_equal(network.infer(module), reference))
    seconds = time.perf_counter() - start
    after, device_after = host_rss_mib(), device_memory() if device_memory else None
    result = {"inferences": count, "identical": identical, "seconds": round(seconds, 2),
              "host_rss_mib_before": round(before, 1), "host_rss_mib_after": round(after, 1),
              "host_rss_growth_mib": round(after - before, 1)}
    if device_memory:
        result.update(device_mib_before=round(device_before / 2 ** 20, 1),
                      device_mib_after=round(device_after / 2 ** 20, 1),
                      device_growth_mib=round((device_after - device_before) / 2 ** 20, 1))
    return result


def threads_with_own_executors(network, threads, runs):
    """``threads`` threads, each binding its own executor and running ``runs`` inferences at
    the same time; every output is compared with a single-threaded run's, bit for bit."""
    reference = network.infer(network.executor())
    identical = [0] * threads
    errors = []
    barrier = threading.Barrier(threads)

    def worker(index):
        try:
            module = network.executor()
            barrier.wait(timeout=120)
            for _ in range(runs):
                identical[index] += bool(np.array_equal(network.infer(module), reference))
        except Exception as exc:                 # noqa: BLE001  reported in the figures
            errors.append(f"thread {index}: {type(exc).__name__}: {exc}")
            barrier.abort()

    start = time.perf_counter()
    workers = [threading.Thread(target=worker, args=(i,), name=f"selftest-{i}") for i in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    return {"threads": threads, "runs_per_thread": runs, "identical": sum(identical),
            "expected": threads * runs, "errors": errors, "seconds": round(time.perf_counter() - start, 2)}


def load_figures(device="cpu", inferences=1000, threads=8, runs=20, batch=100):
    """The figures of one path (``cpu`` or ``gpu``), or {'skipped': reason} where it cannot run."""
    device_memory = None
    if device == "gpu":
        try:
            from .. import kernels
            gpu = kernels.GpuDevice.get()
            kernels.require_nvcc()
        except Ece408Error as exc:
            return {"device": device, "skipped": str(exc)}
        device_memory = gpu.memory_in_use
    network = Network(device, batch)
    figures = {"device": device, "batch": batch, "data": network.data_note}
    if device == "gpu":
        figures["gpu"] = gpu.name
    figures["repeated"] = repeated_inferences(network, inferences, device_memory)
    figures["threads"] = threads_with_own_executors(network, threads, runs)
    return figures

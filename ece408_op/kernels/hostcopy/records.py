"""What each call of the copy path took (``Record``s, the last 4096 kept): ``--profile`` turns a
run's records into the layer's breakdown (cli/breakdown.py).
"""
import threading
from collections import deque
from dataclasses import dataclass, field


@dataclass
class Record:
    """One call of ``forward_into`` (seconds, host clock)."""
    op: str
    mode: str
    x_bytes: int
    y_bytes: int
    wall: float = 0.0            # the whole call
    copy_in: float = 0.0         # x (and k, bias) to the GPU
    kernel_call: float = 0.0     # the kernel entry point: Op Time plus its zeroing, syncs, first compile
    op_time: float = 0.0         # the course's Op Time
    copy_out: float = 0.0        # y back into the caller's memory
    notes: list = field(default_factory=list)
    streams: int = 0             # ECE408_STREAMS's chunks (0: not the streams path); then, on the GPU's clock:
    kernels: float = 0.0         # the chunks' kernels, added up (what Op Time is without copies in between)
    gpu_pipeline: float = 0.0    # from the first copy in starting to the last copy out ending


records = deque(maxlen=4096)
_records_lock = threading.Lock()


def keep(record):
    with _records_lock:
        records.append(record)


def records_since(start):
    """The records added after ``len(records)`` was ``start`` (see ``record_count``)."""
    with _records_lock:
        return list(records)[start:] if start <= len(records) else list(records)


def record_count():
    with _records_lock:
        return len(records)

"""Concurrent writers of the records database, for the submit and grade tests."""
import subprocess

from suitekit import ROOT, python_command

WRITER = """
import sys
from ece408_op.grading.store import Record, open_store
url, worker, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open_store(url) as store:
    for i in range(n):
        assert store.add(Record(f"{worker}-{i}", f"2026-01-01T00:00:{i % 60:02d}", f"team{worker}", "m2", 10,
                                "ok", 0, 0.1, True, [], transcript="x" * 2000))
    assert not store.add(Record(f"{worker}-0", "2026-01-01", "dup", "m2", 10, "ok", transcript="y"))
"""


def parallel_writers(url, workers, each):
    """``workers`` processes, started together, each adding ``each`` records (and one duplicate id)
    to the database at ``url``: every record must be there once, the duplicates nowhere."""
    from ece408_op.grading.store import open_store
    procs = [subprocess.Popen([*python_command(), "-c", WRITER, url, str(w), str(each)], cwd=ROOT)
             for w in range(workers)]
    assert [p.wait(timeout=300) for p in procs] == [0] * workers
    with open_store(url) as store:
        records = store.records()
    assert len(records) == workers * each and len({r.id for r in records}) == workers * each
    assert not any(r.team == "dup" for r in records)

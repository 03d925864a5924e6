"""A synthetic worker for the load test (tests/service/test_load_300_teams.py): it speaks the service's
worker protocol as ``worker`` does (claim with a lease, numbered transcript chunks posted in order,
what piles up during a post going in the next, the end with a record), but runs no milestone:
each job streams LINES lines, one every INTERVAL seconds, each stamped with the time it was
produced, then ends with a made-up valid m2 record. No MXNet, no sandbox: on the 2-core machine
the load test measures the service, not the milestone.

    python tests/loadworker.py URL SLOTS LINES INTERVAL RUNS_FILE     (the token in $ECE408_TOKEN)

Each claim is appended to RUNS_FILE (one job id a line), so the test can check that every job ran
exactly once. SIGTERM ends it."""
import asyncio
import json
import os
import random
import signal
import sys
import time
from datetime import datetime, timezone

from urllib.parse import urlsplit


def record(job, op_time):
    models = [{"model": m, "op_times": [op_time / 2], "op_time": op_time / 2, "correctness": c, "expected": c,
               "correct": True, "layers": []} for m, c in (("ece408-high", 0.91), ("ece408-low", 0.68))]
    return {"id": job["record_id"], "created_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            "team": job["team"], "milestone": job["milestone"], "size": job["size"], "status": "ok",
            "op_time": op_time, "correct": True, "models": models, "device": "synthetic", "engine": "synthetic",
            "transcript": "synthetic\n", "team_files": []}


class Connection:
    """One keep-alive HTTP/1.1 connection of a slot, requests written by hand: a load generator
    must cost little beside the server it measures (httpx's AsyncClient took a whole core at 200
    requests a second here)."""

    def __init__(self, host, port, token):
        self.host, self.port, self.token = host, port, token
        self.reader = self.writer = None

    def close(self):
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def request(self, method, path, body=None, lease=None, timeout=60):
        data = json.dumps(body).encode() if body is not None else b""
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {self.token}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                + (f"X-Lease: {lease}\r\n" if lease else "") + "\r\n").encode()
        for _ in range(200):
            try:
                if self.writer is None:
                    self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
                self.writer.write(head + data)
                status, payload = await asyncio.wait_for(self._response(), timeout)
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError, IndexError):
                self.close()
                await asyncio.sleep(0.5)
                continue
            if status in (502, 503, 504):
                await asyncio.sleep(0.5)
                continue
            return status, json.loads(payload) if payload else None
        raise RuntimeError(f"{path}: no answer")

    async def _response(self):
        status = int((await self.reader.readline()).split()[1])
        length, close = 0, False
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
            elif name.strip().lower() == b"connection" and value.strip().lower() == b"close":
                close = True
        payload = await self.reader.readexactly(length) if length else b""
        if close:
            self.close()
        return status, payload


async def run_job(conn, claim, lines, interval):
    job, lease = claim["job"], claim["lease"]
    path = f"/api/worker/jobs/{job['id']}"
    pending, produced, seq = [], asyncio.Event(), job["next_seq"]
    finished = False
    chunks = Connection(conn.host, conn.port, conn.token)

    async def sender():
        nonlocal seq
        while True:
            if not pending:
                if finished:
                    return
                await produced.wait()
                produced.clear()
                continue
            text = "".join(pending)
            pending.clear()
            status, _ = await chunks.request("POST", f"{path}/chunks", {"chunks": [[seq, text]]}, lease)
            if status != 200:
                raise RuntimeError(f"chunks: HTTP {status}")
            seq += 1
    task = asyncio.ensure_future(sender())
    for k in range(lines):
        pending.append(f"synthetic line {k} {time.time():.6f}\n")
        produced.set()
        await asyncio.sleep(interval)
    finished = True
    produced.set()
    await task
    chunks.close()
    status, _ = await conn.request("POST", f"{path}/finish", {"status": "ok", "exit_code": None, "reason": None,
                                                              "record": record(job, random.uniform(0.01, 1.0))}, lease)
    if status != 200:
        raise RuntimeError(f"finish: HTTP {status}")


async def slot(host, port, token, name, lines, interval, runs, stop):
    conn = Connection(host, port, token)
    while not stop.is_set():
        status, claim = await conn.request("POST", "/api/worker/claim", {"slot": name, "gpu": False,
                                                                         "device": "synthetic", "wait": 20})
        if status != 200:
            continue
        runs.write(claim["job"]["id"] + "\n")
        runs.flush()
        await run_job(conn, claim, lines, interval)


async def main(url, slots, lines, interval, runs_file):
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    parts = urlsplit(url)
    with open(runs_file, "a") as runs:
        tasks = [asyncio.ensure_future(slot(parts.hostname, parts.port, os.environ["ECE408_TOKEN"], f"s{i}", lines,
                                            interval, runs, stop)) for i in range(slots)]
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]))

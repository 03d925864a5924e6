"""The measuring process's report to the runner: a Unix socket only its sandbox can see.

The runner listens on ``<scratch>/channel/channel.sock``, bound into the measuring sandbox only,
and accepts ONE connection, which the measuring process (the grader's code) makes as its first
act, before it starts the team's process; the runner then stops listening. The job (milestone,
models, the hidden model's bytes, the secret seed of fresh inputs) goes in, the results (Op
Times, Correctness, the device) come back. Printed text is for people: the record never parses it.

Messages: a 4-byte big-endian length, then JSON. Sizes are bounded on both sides.
"""
import os
import socket
import threading

from ..errors import Ece408Error
from ..team import wire

SOCKET = "channel.sock"
TARGET = "/run/ece408"                 # where the measuring sandbox sees the socket's folder
JOB_LIMIT = 256 << 20
RESULT_LIMIT = 4 << 20


class ChannelError(Ece408Error):
    pass


def send(sock, message):
    sock.sendall(wire.encode(message))


def recv(sock, limit):
    try:
        return wire.decode(lambda k: sock.recv(min(k, 1 << 20)), limit)
    except EOFError as exc:
        raise ChannelError("the measuring process closed its channel before it reported") from exc
    except ValueError as exc:
        raise ChannelError(f"a malformed report ({exc})") from exc


class Listener:
    """The runner's end: ``start(job)`` serves one connection in a thread; ``result()`` is the
    report, or None with ``error`` saying why there is none."""

    def __init__(self, folder):
        self.path = os.path.join(str(folder), SOCKET)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        os.chmod(self.path, 0o777)           # the sandbox's user connects; only its sandbox sees the folder
        self.sock.listen(1)
        self.report = None
        self.error = "the measuring process never connected"
        self.thread = None
        self._closed = threading.Event()

    def start(self, job):
        self.thread = threading.Thread(target=self._serve, args=(job,), daemon=True)
        self.thread.start()
        return self

    def _serve(self, job):
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        finally:
            self.close_listener()
        with conn:
            try:
                self.error = "the measuring process ended before it reported"
                send(conn, job)
                self.report = recv(conn, RESULT_LIMIT)
                self.error = None
            except (OSError, ChannelError, ValueError) as exc:
                self.error = f"its report could not be read ({exc})"

    def close_listener(self):
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def result(self, wait=5.0):
        """The report once the measuring process has ended (waits ``wait`` s for the thread)."""
        self.close_listener()
        if self.thread is not None:
            self.thread.join(wait)
        return self.report


def connect(path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    return sock

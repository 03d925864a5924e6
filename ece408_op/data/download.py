"""Bounded HTTP(S) downloads: an overall deadline, a size cap, a per-read timeout.

* The deadline covers the whole fetch, however the server trickles its bytes: a watchdog
  shuts the connection down when it passes (a per-read timeout alone lets a server that
  sends one byte every few seconds keep a download alive forever).
* The size cap comes from the file's known size: a body longer than that is cut off as
  soon as it passes the cap (an endless body cannot fill memory or disk); a server that
  announces more than the cap is refused before anything is read.
* The body goes into ``sink`` (a file: the npm tarball) or memory (the small official files).
"""
import io
import socket
import threading
import time

from ..errors import DataError
from .files import storage_error

DEFAULT_TIMEOUT = 900.0          # seconds for a whole fetch (python -m ece408_op fetch --timeout)
READ_TIMEOUT = 60.0              # seconds without a byte before a read gives up
_BLOCK = 1 << 16


class Deadline:
    """A point in time that a fetch must finish by."""

    def __init__(self, seconds):
        self.seconds = float(seconds)
        self.end = time.monotonic() + self.seconds

    def remaining(self):
        return self.end - time.monotonic()

    def error(self, what):
        return DataError(f"{what} did not finish within the {self.seconds:g} s deadline (a slow or stalled "
                         "server); try again later, another mirror, or a longer --timeout")

    def check(self, what):
        if self.remaining() <= 0:
            raise self.error(what)


class _Watchdog:
    """Shuts a response's socket down at the deadline, waking a read blocked in it."""

    def __init__(self, response, seconds):
        self.fired = False
        self._response = response
        self._timer = threading.Timer(max(seconds, 0.0), self._fire)
        self._timer.daemon = True

    def _fire(self):
        self.fired = True
        sock = _socket_of(self._response)
        try:
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
            else:
                self._response.close()
        except OSError:
            pass

    def __enter__(self):
        self._timer.start()
        return self

    def __exit__(self, *exc):
        self._timer.cancel()
        return False


def _socket_of(response):
    """The socket under a requests response (urllib3 1.x and 2.x), or None."""
    raw = getattr(response, "raw", None)
    conn = getattr(raw, "connection", None) or getattr(raw, "_connection", None)
    sock = getattr(conn, "sock", None)
    if sock is None:
        fp = getattr(getattr(raw, "_fp", None), "fp", None)
        sock = getattr(getattr(fp, "raw", None), "_sock", None)
    return sock


def download(url, deadline, max_bytes, sink=None, progress=None, read_timeout=READ_TIMEOUT):
    """GET ``url`` into ``sink`` (a binary file) or memory; returns the bytes (memory) or the count.

    Raises DataError for HTTP errors, a body over ``max_bytes``, a cut-off body, the deadline,
    network failures; a write error of ``sink`` becomes a storage error."""
    import requests
    import urllib3

    deadline.check(f"download of {url}")
    out = io.BytesIO() if sink is None else sink
    received = 0
    timeout = max(0.001, min(read_timeout, deadline.remaining()))
    try:
        with requests.get(url, stream=True, timeout=(timeout, timeout)) as response, \
                _Watchdog(response, deadline.remaining()) as watchdog:
            if response.status_code != 200:
                raise DataError(f"{url}: HTTP {response.status_code}; check the URL (or the mirror)")
            announced = int(response.headers.get("Content-Length") or 0) or None
            if announced is not None and announced > max_bytes:
                raise DataError(f"{url}: the server announces {announced} bytes but the file is {max_bytes} "
                                "bytes; not the expected file (check the URL or the mirror)")
            read = getattr(response.raw, "read1", None) or response.raw.read
            while True:
                try:
                    block = read(_BLOCK, decode_content=True)
                except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                    if watchdog.fired:
                        raise deadline.error(f"download of {url}") from exc
                    if announced is not None and received < announced:
                        raise DataError(f"download of {url} was cut short ({received} of {announced} bytes; "
                                        f"{type(exc).__name__}); try again") from exc
                    raise DataError(f"download of {url} failed ({type(exc).__name__}); check the URL "
                                    "or your connection and try again") from exc
                if not block:
                    break
                received += len(block)
                if received > max_bytes:
                    raise DataError(f"{url}: the server sent more than the file's {max_bytes} bytes; "
                                    "stopped (not the expected file: check the URL or the mirror)")
                try:
                    out.write(block)
                except OSError as exc:
                    raise storage_error(getattr(out, "name", "the download"), exc) from exc
                if progress is not None:
                    progress.update(len(block))
                deadline.check(f"download of {url}")
            if watchdog.fired:
                raise deadline.error(f"download of {url}")
    except requests.RequestException as exc:
        if deadline.remaining() <= 0:
            raise deadline.error(f"download of {url}") from exc
        raise DataError(f"download of {url} failed ({type(exc).__name__}); check the URL "
                        "or your connection and try again") from exc
    if announced is not None and received != announced:
        raise DataError(f"download of {url} was cut short ({received} of {announced} bytes); try again")
    return out.getvalue() if sink is None else received

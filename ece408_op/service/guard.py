"""The server's connections, kept within the process's descriptors: a budget, a time limit on a
request's headers, and who gives way when the budget is spent.

Each connection holds one file descriptor. ``serve`` raises its soft limit to the hard one
(``raise_descriptor_limit``) and keeps the connections ``budget`` below it (room for the
database's pool, the log, the workers' pipes). Past the budget a new connection is never left to
fail in ``accept`` (which would stop every request, the login page's too): the quietest
connection that is not being served closes to make room, where being served means a whole
request received and its answer flowing. So a connection whose headers or body are still coming,
one idle between two requests, and one whose client does not read its answer give way first;
where every connection is served, the new one is answered ``503`` with ``Retry-After`` and
closed. A connection whose request headers have not all arrived ``header_seconds`` after it
opened (or after its last response) is closed, as is one whose client reads nothing of its
answer for WRITE_STALL_SECONDS; a body that stalls is the application's to drop (``http.read_body``).
Live streams are capped by the application (``limits.py``: per team, session and address), so
that served connections cannot fill the budget either.

``GuardedH11`` is uvicorn's h11 protocol with these rules; ``protocol_class(guard)`` gives the
class uvicorn's ``Config(http=...)`` takes.
"""
import resource
import socket
import time
from collections import OrderedDict

from uvicorn.protocols.http.h11_impl import H11Protocol

from .logs import log

ACCEPT_BURST = 8                    # connections the event loop accepts in one go (asyncio takes as many
                                    # as the backlog it is given) before any of them is seen here
QUEUE = 1024                        # connections the kernel queues for accept (the listen backlog, set
                                    # again once the server listens: ``deepen_queue``)
RESERVE = 160                       # descriptors kept for everything but the connections: the bursts
                                    # accepted and not yet seen (a few loop turns' worth) and those closing
HEADER_SECONDS = 10.0
WRITE_STALL_SECONDS = 30.0          # a client that reads nothing of its answer this long is let go
RETRY = 5                           # seconds a refused client waits
REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: %d\r\n"
           b"connection: close\r\ncontent-length: %d\r\n\r\n%s")
BUSY = b'{"error": "the service has as many connections as it can hold; try again in a few seconds"}'


def deepen_queue(sockets):
    """The kernel's queue of each listening socket made QUEUE long: asyncio listens with the backlog
    it accepts in one go (ACCEPT_BURST), too short a queue for a class's burst of connections."""
    for sock in sockets or ():
        sock.listen(QUEUE)


def raise_descriptor_limit():
    """Raise this process's soft limit on open files to its hard limit; returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if wanted > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    return soft


class Guard:
    """The connections of one server: at most ``budget`` at once, the waiting ones given way."""

    def __init__(self, reserved, header_seconds=HEADER_SECONDS, limit=None):
        self.reserved = reserved + RESERVE
        self.limit = limit                       # a fixed descriptor limit (tests); None: the process's own
        self.header_seconds = header_seconds
        self.open = set()
        self.waiting = OrderedDict()              # connections not serving a request, oldest first
        self.refused = self.evicted = self.timed_out = self.stalled = 0
        self._said = 0.0

    @classmethod
    def for_this_process(cls, reserved, header_seconds=HEADER_SECONDS):
        """A guard for this process, its soft descriptor limit raised to the hard one first."""
        raise_descriptor_limit()
        return cls(reserved, header_seconds)

    @property
    def budget(self):
        """Connections at most: the soft descriptor limit as it is now (an administrator may lower it
        under a running server: ``prlimit --pid``) less ``reserved`` (the database's pool, the
        workers' pipes, the log) and RESERVE; at least 8."""
        limit = self.limit or resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if limit == resource.RLIM_INFINITY:
            limit = 1 << 20
        return max(8, limit - self.reserved)

    def admit(self, conn):
        """Whether ``conn`` may open: True, after closing the oldest waiting connection where the
        budget is spent; False where every connection is serving a request."""
        if len(self.open) >= self.budget:
            if not self.waiting:
                self.refused += 1
                self._say()
                return False
            oldest, _ = self.waiting.popitem(last=False)
            self.evicted += 1
            self._say()
            oldest.close_quietly()
        self.open.add(conn)
        self.wait(conn)
        return True

    def wait(self, conn):
        self.waiting[conn] = time.monotonic()
        self.waiting.move_to_end(conn)

    def serve(self, conn):
        self.waiting.pop(conn, None)

    def gone(self, conn):
        self.open.discard(conn)
        self.waiting.pop(conn, None)

    def _say(self):
        """One log line every 10 s at most while connections are refused or closed for room."""
        now = time.monotonic()
        if now - self._said >= 10.0:
            self._said = now
            log("connections.full", level="warning", budget=self.budget, refused=self.refused,
                closed_for_room=self.evicted, headers_too_slow=self.timed_out, not_reading=self.stalled)


def no_delay(transport):
    """TCP_NODELAY on the connection's socket: an answer goes out as it is written. Without it, the
    second request of a kept-alive connection waits for the client's delayed ACK (Nagle's rule meets
    it): about 40 ms on every request after the first. asyncio sets it only where the listening
    socket was made with IPPROTO_TCP; serve's, like any made with proto 0, were not."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:                         # the connection already gone
            pass


def protocol_class(guard):
    """uvicorn's h11 protocol under ``guard``."""
    return type("GuardedH11", (GuardedH11,), {"guard": guard})


class GuardedH11(H11Protocol):
    guard = None

    def connection_made(self, transport):
        self._header_timer = self._write_timer = None
        self._write_paused = False
        if not self.guard.admit(self):
            body = BUSY
            transport.write(REFUSAL % (RETRY, len(body), body))
            transport.close()
            self._refused = True
            return
        self._refused = False
        no_delay(transport)
        super().connection_made(transport)
        self._start_header_timer()

    def connection_lost(self, exc):
        self._stop_header_timer()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        if self._refused:
            return
        self.guard.gone(self)
        super().connection_lost(exc)

    def data_received(self, data):
        if self._refused:
            return
        super().data_received(data)
        if self.cycle is not None and not self.cycle.response_complete:
            self._stop_header_timer()
            if self.cycle.more_body:
                self.guard.wait(self)           # its body still coming: it may give way, the quietest first
            elif not self._write_paused:
                self.guard.serve(self)

    def pause_writing(self):
        """The client does not read what it is sent (a download, a transcript, never read): the
        connection may give way, and is closed after WRITE_STALL_SECONDS of it."""
        super().pause_writing()
        self._write_paused = True
        self.guard.wait(self)
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(WRITE_STALL_SECONDS, self._write_stalled)

    def resume_writing(self):
        super().resume_writing()
        self._write_paused = False
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        if self.cycle is not None and not self.cycle.response_complete and not self.cycle.more_body:
            self.guard.serve(self)

    def _write_stalled(self):
        self._write_timer = None
        if self._write_paused:
            self.guard.stalled += 1
            self.close_quietly()

    def on_response_complete(self):
        super().on_response_complete()
        if not self.transport.is_closing():
            self.guard.wait(self)
            self._start_header_timer()

    def _start_header_timer(self):
        self._stop_header_timer()
        self._header_timer = self.loop.call_later(self.guard.header_seconds, self._headers_too_slow)

    def _stop_header_timer(self):
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self):
        self._header_timer = None
        if self.cycle is None or self.cycle.response_complete:
            self.guard.timed_out += 1
            self.close_quietly()

    def close_quietly(self):
        self._stop_header_timer()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        self.guard.gone(self)
        if self.transport.get_write_buffer_size():
            self.transport.abort()              # close() would wait for a client that reads nothing: the
        elif not self.transport.is_closing():   # descriptor (and a download's file) held until it does
            self.transport.close()

"""The service's clock: the wall clock read once, advanced by the monotonic clock.

Rules:
- ``now()`` is the time every lease, heartbeat, time limit, per-hour window, session, build
  expiry and deadline of the service is stored and compared in (seconds since the epoch, like
  ``time.time()``): the wall clock as this process read it at its start (``anchor``), plus the
  monotonic time elapsed since. A step of the system's clock (an operator's ``date -s``, a VM
  resumed, NTP stepping a wrong clock) while ``serve`` runs changes no lease, window or limit;
  NTP's slewing reaches it through the monotonic clock, which Linux slews alike.
- A new process reads the wall clock again: a step between two lives of ``serve`` moves the
  stored times by that step once (``jobs.restarted`` gives every running job a full lease from
  the restart, so no lease is decided across it).
- Log lines (``logs.py``) and the records a worker writes keep the system's wall clock as it is:
  they are read next to other programs' logs.
- Tests only: ``$ECE408_TEST_CLOCK_OFFSET_FILE`` names a file holding a number of seconds that
  ``install_test_offset`` adds to every ``time.time()`` of the process (read again at most every
  0.1 s; a missing or unreadable file, or one not holding a finite number, adds 0), so that a real ``serve`` can have its clock stepped.
"""
import math
import os
import time

OFFSET_ENV = "ECE408_TEST_CLOCK_OFFSET_FILE"
REREAD = 0.1                                   # seconds an offset read from the file is kept


class Steady:
    """A wall clock that only the monotonic clock moves: ``wall`` read once at ``anchor``."""

    def __init__(self, wall=time.time, monotonic=time.monotonic):
        self.wall, self.monotonic = wall, monotonic
        self.anchor()

    def anchor(self):
        """Read the wall clock again (a process's start)."""
        self.start_wall, self.start_mono = self.wall(), self.monotonic()

    def now(self):
        return self.start_wall + (self.monotonic() - self.start_mono)


_clock = Steady(wall=lambda: time.time())   # looks time.time up at each anchor: a test offset applies


def now():
    """The service's time (see the module docstring)."""
    return _clock.now()


def anchor():
    """At a process's start: the service's clock is read from the wall clock again."""
    _clock.anchor()


class Offset:
    """``time.time`` plus the seconds in ``path`` (the test hook of the module docstring)."""

    def __init__(self, path, real=time.time, monotonic=time.monotonic):
        self.path, self.real, self.monotonic = path, real, monotonic
        self.value, self.read_at = 0.0, None

    def seconds(self):
        if self.read_at is None or self.monotonic() - self.read_at > REREAD:
            try:
                with open(self.path, encoding="ascii") as f:
                    value = float(f.read().strip() or 0)
                self.value = value if math.isfinite(value) else 0.0
            except (OSError, ValueError, UnicodeDecodeError):
                self.value = 0.0
            self.read_at = self.monotonic()
        return self.value

    def __call__(self):
        return self.real() + self.seconds()


def install_test_offset(environ=os.environ):
    """Where ``$ECE408_TEST_CLOCK_OFFSET_FILE`` is set, shift this process's ``time.time`` by the
    file's seconds (tests only) and anchor the service's clock; returns whether it did."""
    path = environ.get(OFFSET_ENV)
    if not path:
        return False
    if not isinstance(time.time, Offset):
        time.time = Offset(path)
    anchor()
    return True

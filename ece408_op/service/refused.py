"""The refusal every layer of the service raises (the rules, the limits, the HTTP checks, the
routes): ``Refused(status, message, retry_after=None, holds=None)``, which the application answers
as one-line JSON with that status (and ``Retry-After`` where it says how long to wait). Its own
module, below everything that raises it, so that none of them imports the queue for it."""


class Refused(Exception):
    """A request the rules refuse: HTTP ``status``, one line, and where it helps a wait time."""

    def __init__(self, status, message, retry_after=None, holds=None):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.holds = holds                   # seconds it holds whatever happens meanwhile (None: it may not)

    def __reduce__(self):                    # whole across a process (a check's refusal: checker.py)
        return type(self), (self.status, str(self), self.retry_after, self.holds)

"""The service's own error: what stops ``serve`` from starting, in one line."""
from ..errors import Ece408Error


class ServeError(Ece408Error):
    """The service cannot start (a port in use, an unreadable token file, no database, no Slurm...)."""

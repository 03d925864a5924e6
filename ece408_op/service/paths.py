"""Where the service keeps its files, per user (XDG folders): the server's database and state
folder (the instructor's token, the Slurm workers' token and logs), the client's login."""
import os
from pathlib import Path


def _xdg(variable, default):
    return Path(os.environ.get(variable) or Path.home() / default)


def default_state_dir():
    return _xdg("XDG_STATE_HOME", ".local/state") / "ece408_op" / "service"


def default_db():
    return str(_xdg("XDG_DATA_HOME", ".local/share") / "ece408_op" / "service.db")


def instructor_token_file(state_dir=None):
    return Path(state_dir or default_state_dir()) / "instructor.token"


def login_file():
    return _xdg("XDG_CONFIG_HOME", ".config") / "ece408_op" / "login.json"

"""Where the service keeps its files, per user (``base.files.user_folder``: XDG folders, or
%APPDATA% / %LOCALAPPDATA% on Windows): the server's database and state folder (the instructor's
token, the Slurm workers' token and logs), the client's login."""
from pathlib import Path

from ..base.files import user_folder


def default_state_dir():
    return user_folder("state", "service")


def default_db():
    return str(user_folder("data", "service.db"))


def instructor_token_file(state_dir=None):
    return Path(state_dir or default_state_dir()) / "instructor.token"


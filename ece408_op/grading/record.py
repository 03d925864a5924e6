"""A run's record: one row of the ``runs`` table (``COLUMNS``), its SQL insert, and the errors
of storing it. A record is written once, in one INSERT with an id chosen by its writer; a second
insert of the same id is ignored (``ON CONFLICT DO NOTHING``), so a retried or fall-back write
never duplicates a record. ``store.py`` keeps the databases, ``spool.py`` the records waiting for
one."""
import json
import math
from dataclasses import asdict, dataclass, field

from ..errors import Ece408Error

COLUMNS = ("id", "created_at", "team", "milestone", "size", "status", "exit_code", "op_time",
           "correct", "models", "git_commit", "content_hash", "device", "engine", "image", "host",
           "duration_s", "transcript", "team_files", "isolated", "options", "options_key", "reason")


class StoreError(Ece408Error):
    """The database cannot be opened, migrated or written."""


class SpooledError(StoreError):
    """The record could not be stored and waits in the spool (``path``): it is kept, not lost."""

    def __init__(self, message, record, path):
        super().__init__(message)
        self.record, self.path = record, path


@dataclass
class Record:
    """One submission run (see COLUMNS); ``models`` is a list of ModelResult dicts."""
    id: str
    created_at: str
    team: str
    milestone: str
    size: int
    status: str                   # ok, failed, timeout (final); killed, error (run again by grade)
    exit_code: int = None
    op_time: float = None         # sum of every Op Time of every model
    correct: bool = False         # every model's Correctness equals its expected value
    models: list = field(default_factory=list)
    git_commit: str = None
    content_hash: str = None
    device: str = None
    engine: str = None
    image: str = None
    host: str = None
    duration_s: float = None
    transcript: str = ""
    team_files: list = field(default_factory=list)   # [{name, sha256, size}] a ranked run measured
    isolated: bool = False                           # its engine isolated the team's processes
    options: dict = None                             # what it was measured with (grading/options.py)
    options_key: str = None                          # options_key(options)
    reason: str = None                               # why a run is not valid (one line), else None

    def row(self):
        values = {**self.__dict__, "models": json.dumps(self.models), "correct": int(bool(self.correct)),
                  "team_files": json.dumps(self.team_files), "isolated": int(bool(self.isolated)),
                  "options": None if self.options is None else json.dumps(self.options, sort_keys=True)}
        return tuple(values[c] for c in COLUMNS)

    @classmethod
    def from_row(cls, row):
        """The Record of a database row; ValueError where a column is not of its type."""
        values = dict(zip(COLUMNS, row))
        values["models"] = json.loads(values["models"])
        values["team_files"] = json.loads(values["team_files"]) if values.get("team_files") else []
        values["correct"] = bool(values["correct"])
        values["isolated"] = bool(values.get("isolated"))
        values["options"] = json.loads(values["options"]) if values.get("options") else None
        if not isinstance(values["models"], list) or not all(isinstance(m, dict) for m in values["models"]):
            raise ValueError("models is not a list of objects")
        if values["op_time"] is not None and (not isinstance(values["op_time"], (int, float))
                                              or not math.isfinite(values["op_time"])):
            raise ValueError("op_time is not a number")
        if not isinstance(values["size"], int) or not isinstance(values["team"], str):
            raise ValueError("size or team is not of its type")
        return cls(**values)

    def to_json(self):
        return json.dumps(asdict(self))


INSERT_RUN = (f"INSERT INTO runs ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))}) "
              "ON CONFLICT (id) DO NOTHING")


def insert_statement(record):
    """(SQL with ``?`` placeholders, parameters) inserting ``record`` unless its id is stored: for
    a writer that puts the record in a transaction of its own (the service ends a job with it)."""
    return INSERT_RUN, record.row()

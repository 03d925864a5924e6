"""The service's one door into grading/ and team/: every name it uses from them is imported here,
so that a move of grading's modules touches this file only. No MXNet: the runs happen in the
worker's child process, through grading's runner, as the local ``submit`` runs them."""
import os
import tempfile
from pathlib import Path

from ..base.terms import CONFIG_NAME
from ..grading.config import ConfigError, load_config, value_line
from ..base.names import shown
from ..grading.kinds import (KindError, kind_of, listed as listed_kinds, matching as matching_kinds,
                             resolve as resolve_kind)
from ..grading.ranking import (RankingError, Table, board as make_board, csv_cell, format_board, format_csv,
                               mark_ties, no_records, only, ranking_report, valid)
from ..grading.development import run_development
from ..grading.inputs import data_dir, model_dirs
from ..grading.machine import cpu_name, gpu_name, gpu_query
from ..grading.request import GPU_MILESTONES, MILESTONES, Options, SubmitError, SubmitRequest
from ..grading.runner import submit
from ..grading.sandbox import ENGINES
from ..grading.steps import Stopped, stop_on_signals
from ..grading.transcript import Transcript, killed_line
from ..grading.store import COLUMNS as RECORD_COLUMNS, POSTGRES_PREFIXES, Record, StoreError, describe, \
    insert_statement, open_store, resolve_url

__all__ = ["ConfigError", "ENGINES", "GPU_MILESTONES", "MILESTONES", "Options",
           "POSTGRES_PREFIXES", "Record", "Stopped", "StoreError", "SubmitError", "SubmitRequest", "Transcript",
           "cpu_name", "data_dir", "describe", "insert_statement", "device_name", "gpu_indices", "gpu_name", "gpu_query", "killed_line", "model_dirs", "open_store",
           "no_records", "ranking_report", "resolve_url", "run_development",
           "stop_on_signals", "submit", "check_build_config", "record_summary",
           # the pages (standings.py): the ranking's own steps, so that a page ranks as `ranking` does
           "RECORD_COLUMNS", "RankingError", "Table", "csv_cell", "format_board", "format_csv", "make_board",
           "mark_ties", "only", "valid",
           # device kinds (grading/kinds.py): the ranking's tables, the kind a job asks for
           "KindError", "kind_of", "listed_kinds", "matching_kinds", "resolve_kind",
           # the line of rai_build.yml a refusal names (capacity.py)
           "value_line"]


def check_build_config(text):
    """The problems of a rai_build.yml given as bytes, checked by grading's own reader (the
    same rules as a local development run); returns its BuildConfig. ConfigError otherwise."""
    with tempfile.TemporaryDirectory(prefix="ece408-config-") as folder:
        with open(os.path.join(folder, CONFIG_NAME), "wb") as f:
            f.write(text)
        return load_config(Path(folder))


def gpu_indices():
    """The indices of this machine's NVIDIA GPUs (nvidia-smi), [] where there is none."""
    import shutil
    import subprocess
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip().isdigit()] if out.returncode == 0 else []


DEVICE_NAME_ENV = "ECE408_DEVICE_NAME"   # for tests only: the name every slot reports (its kind, for the queue)


def device_name(gpu):
    """What a worker slot runs on: the CPU's name (``gpu`` None), the GPU's that
    $CUDA_VISIBLE_DEVICES names ("visible"), or that of GPU index ``gpu``. $ECE408_DEVICE_NAME,
    where set, is reported instead, for tests only: it lets workers on one machine stand for
    several device kinds in the queue (the records keep the name their runs measured on)."""
    import shutil
    import subprocess
    if os.environ.get(DEVICE_NAME_ENV, "").strip():
        return os.environ[DEVICE_NAME_ENV].strip()
    if gpu is None:
        return cpu_name()
    if gpu == "visible" or shutil.which("nvidia-smi") is None:
        return gpu_name() or "a GPU"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", f"--id={gpu}"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "a GPU"
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "a GPU"


def record_summary(record):
    """The line the local ``submit`` prints after a ranked run, for the service's transcript."""
    summary = (f"total Op Time {record.op_time:.6f} s, " if record.op_time is not None else "") + \
        ("Correctness as expected" if record.correct else "not valid for the ranking")
    return (f"* Record {record.id} ({shown(record.team)}, {record.milestone}, {record.size} images): "
            f"{record.status}; {summary}")


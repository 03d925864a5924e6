"""``python -m ece408_op submit [FOLDER]``: run a submission's rai_build.yml as the course server
did (``* Running <command>`` transcript), or with ``--submit m2|m3|final`` the milestone's fixed
commands, storing a record for the ranking."""
from ..grading import runner
from ..grading.engine import ENGINES
from ..grading.store import DB_ENV, default_sqlite_path, describe, open_store
from .errors import ArgumentParser, run


def positive(text):
    value = float(text)
    if value <= 0:
        raise ValueError(text)
    return value


positive.__name__ = "positive number"


def add_run_options(parser):
    """Options shared by submit and grade."""
    parser.add_argument("--engine", choices=("auto", "host", *ENGINES),
                        help="where the commands run (default $ECE408_ENGINE, else auto: docker with a daemon, "
                             "podman, buildah, else the host)")
    parser.add_argument("--image", help="image to run in (default: rai.image of rai_build.yml)")
    parser.add_argument("--timeout", type=positive, default=runner.DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"time limit of each command (default {runner.DEFAULT_TIMEOUT:g})")
    parser.add_argument("--size", type=int, default=runner.DEFAULT_SIZE, metavar="N",
                        help=f"with --submit: images per run, 1-10000 (default {runner.DEFAULT_SIZE})")
    parser.add_argument("--hidden-model", metavar="PREFIX",
                        help="with --submit: staff's hidden third model (checkpoint prefix)")
    parser.add_argument("--db", help=f"database: a SQLite path or a postgresql:// URL "
                                     f"(default ${DB_ENV}, else {default_sqlite_path()})")
    parser.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")


def check_size(parser, size):
    if not 1 <= size <= 10000:
        parser.error(f"--size must be from 1 to 10000, not {size}")


def command(argv):
    parser = ArgumentParser(prog="ece408_op submit",
                            description="Run a submission folder's rai_build.yml like the course server; "
                                        "--submit runs a milestone's fixed commands and stores a record.")
    parser.add_argument("folder", nargs="?", default=".", help="the submission (default: this folder)")
    parser.add_argument("--submit", choices=tuple(runner.SCRIPTS), metavar="{m2,m3,final}",
                        help="run the milestone's fixed commands on both models and store the record")
    parser.add_argument("--team", help=f"team name in the record (default ${runner.TEAM_ENV}, else the user name)")
    parser.add_argument("--keep-scratch", action="store_true", help="keep the scratch copy (its path is printed)")
    add_run_options(parser)
    args = parser.parse_args(argv)
    check_size(parser, args.size)
    options = runner.Options(args.engine, args.image, args.timeout, keep_scratch=args.keep_scratch)
    if args.submit is None:
        if args.hidden_model:
            parser.error("--hidden-model goes with --submit")
        build = runner.run_submission(args.folder, options)
        return 0 if build.status == "ok" else (build.exit_code or 1)
    request = runner.SubmitRequest(args.folder, args.submit, args.size, args.team, args.hidden_model,
                                   options=options)
    runner.check_device(args.submit)                   # before opening anything: a clear error
    with open_store(args.db) as store:
        record = runner.submit(request, store)
        where = describe(store.url)
    summary = (f"total Op Time {record.op_time:.6f} s, " if record.op_time is not None else "") + \
        ("Correctness as expected" if record.correct else "not valid for the ranking")
    print(f"* Record {record.id} ({record.team}, {record.milestone}, {record.size} images): "
          f"{record.status}; {summary}; stored in {where}")
    return {"ok": 0, "killed": 143}.get(record.status, record.exit_code or 1)


def main(argv):
    return run(command, argv)

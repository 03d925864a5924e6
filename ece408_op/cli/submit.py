"""``python -m ece408_op submit [FOLDER]``: a development run of a submission's rai_build.yml
(each command in a sandbox, the course's ``* Running <command>`` transcript, no record), or
with ``--submit m2|m3|final`` a ranked run of the team's forward (the grader's harness measures
it; a record for the ranking)."""
from ..base.terms import DEFAULT_SIZE
from ..course import MILESTONES, RANKED
from ..grading import request as req, runner
from ..grading.development import run_development
from ..grading.machine import check_device
from ..grading.sandbox import ENGINES, Limits
from ..grading.store import DB_ENV, Delivery, default_sqlite_path, describe, open_store
from ..team.project import require_files
from .argtypes import positive, whole
from .errors import ArgumentParser, run
from .remote import LOCAL, RULE
from .teamargs import check_size, team_folder


SERVICE_FORM = ("On the class's service (--server URL, $ECE408_SERVER, or after 'login') it also takes --gpu KIND "
                "(a device kind) and --detach (queue it and return), and none of the options of how runs are made "
                "here: 'submit --server URL --help' lists them.")


def add_run_options(parser):
    """Options shared by submit and grade: where the commands run and what they may use."""
    limits = Limits()
    parser.add_argument("--engine", choices=("auto", *ENGINES),
                        help="the sandbox each team command runs in (default $ECE408_ENGINE, else auto: bubblewrap "
                             "where it works, else podman, docker, buildah); 'host' runs them NOT isolated")
    parser.add_argument("--image", help="the image container engines run in (default: rai.image; ranked runs "
                                        "ece408_op:latest)")
    parser.add_argument("--timeout", type=positive, default=req.DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"time limit of each command (default {req.DEFAULT_TIMEOUT:g})")
    parser.add_argument("--memory", type=positive, default=limits.memory / 2**30, metavar="GIB",
                        help=f"memory of each command (default {limits.memory / 2**30:g} GiB)")
    parser.add_argument("--processes", type=whole, default=limits.processes, metavar="N",
                        help=f"processes and threads of each command (default {limits.processes})")
    parser.add_argument("--cpu-time", type=whole, default=limits.cpu_seconds, metavar="SECONDS",
                        help=f"CPU time of each command (default {limits.cpu_seconds})")
    parser.add_argument("--disk", type=positive, default=limits.disk / 2**30, metavar="GIB",
                        help=f"size of /build and of /tmp (default {limits.disk / 2**30:g} GiB each)")
    parser.add_argument("--max-output", type=positive, default=limits.output / 2**20, metavar="MIB",
                        help=f"output of each command before it is stopped (default {limits.output / 2**20:g} MiB)")
    parser.add_argument("--scratch", metavar="DIR", help="where scratch folders go (default $TMPDIR)")
    parser.add_argument("--size", type=int, default=DEFAULT_SIZE, metavar="N",
                        help=f"with --submit: images per run, 1-10000 (default {DEFAULT_SIZE})")
    parser.add_argument("--hidden-model", metavar="PREFIX",
                        help="with --submit: staff's hidden third model (checkpoint prefix)")
    parser.add_argument("--repeats", type=int, metavar="N",
                        help="with --submit: timed runs on fresh inputs per layer, 1-100 (default: 5 for final, "
                             "1 otherwise)")
    parser.add_argument("--db", help=f"database: a SQLite path or a postgresql:// URL "
                                     f"(default ${DB_ENV}, else {default_sqlite_path()})")
    parser.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")


def limits_of(args):
    return Limits(memory=int(args.memory * 2**30), processes=args.processes, cpu_seconds=args.cpu_time,
                  disk=int(args.disk * 2**30), output=int(args.max_output * 2**20),
                  file_size=int(args.disk * 2**30))


def options_of(args, keep_scratch=False):
    return req.Options(args.engine, args.image, args.timeout, args.scratch, keep_scratch, limits_of(args))


def check_repeats(parser, repeats, ranked=True):
    """Ranked runs time at least one fresh input per layer: the time that ranks must come from an
    input no team can know in advance."""
    low = 1 if ranked else 0
    if repeats is not None and not low <= repeats <= 100:
        parser.error(f"--repeats must be from {low} to 100, not {repeats}"
                     + (" (a ranked run times at least one fresh input a layer)" if ranked and repeats == 0 else ""))


def command(argv):
    parser = ArgumentParser(prog="ece408_op submit",
                            description="Run a submission folder's rai_build.yml in a sandbox like the course "
                                        "server (a development run); --submit measures the team's forward with "
                                        "the grader's harness and stores a ranked record. " + RULE["submit"],
                            epilog=SERVICE_FORM)
    parser.add_argument("folder", nargs="?", help="the team's folder (default: --team, else this folder)")
    parser.add_argument("--submit", choices=RANKED, metavar="{m2,m3,final}",
                        help="a ranked run: the team's new-forward.py (m2) or new-forward.cu + launch.py (m3, final) "
                             "on both course models, measured by the grader's harness; stores the record")
    parser.add_argument("--team", metavar="DIR", help="the team's folder, as for the milestones (default: this folder)")
    parser.add_argument("--name", help="the team's name in the record (default: the team folder's name)")
    parser.add_argument("--keep-scratch", action="store_true", help="keep the scratch copy (its path is printed)")
    parser.add_argument("--allow-network", action="store_true",
                        help="development runs: give commands the network when rai_build.yml says network: true "
                             "(refused otherwise: the grading host's own services would be in reach)")
    parser.add_argument("--dry-run", action="store_true",
                        help="list what the run would take from the folder (each file and its size, what is left "
                             "out and why: as an upload to the service) and run nothing")
    add_run_options(parser)
    parser.add_argument(LOCAL, action="store_true", help="run it here even when logged in to the class's service")
    args = parser.parse_args(argv)
    folder = team_folder(parser, args)
    if args.dry_run:
        from ..client.api import dry_run
        return dry_run(folder, args.submit)
    check_size(parser, args.size)
    check_repeats(parser, args.repeats, ranked=args.submit is not None)
    options = options_of(args, args.keep_scratch)
    options.allow_network = args.allow_network
    if args.submit is None:
        for flag, value in (("--hidden-model", args.hidden_model), ("--repeats", args.repeats), ("--name", args.name)):
            if value is not None:
                parser.error(f"{flag} goes with --submit")
        build = run_development(folder, options)
        print("* Development run: no record is stored (ranked runs: --submit m2|m3|final)")
        return 0 if build.status == "ok" else (build.exit_code or 1)
    require_files(folder, MILESTONES[args.submit].files)    # a folder that is no team's: refused, nothing stored
    request = req.SubmitRequest(folder, args.submit, args.size, args.name, args.hidden_model,
                                   options=options, repeats=args.repeats)
    check_device(args.submit)                   # before opening anything: a clear error
    with open_store(args.db) as store:                 # a database that cannot be used: said before the run
        where = describe(store.url)
    record = runner.submit(request, Delivery(args.db))
    summary = (f"total Op Time {record.op_time:.6f} s, " if record.op_time is not None else "") + \
        ("Correctness as expected" if record.correct else "not valid for the ranking")
    from ..base.names import shown
    print(f"* Record {record.id} ({shown(record.team)}, {record.milestone}, {record.size} images): "
          f"{record.status}; {summary}; stored in {where}")
    return {"ok": 0, "killed": 143}.get(record.status, 1)


def main(argv):
    return run(command, argv)

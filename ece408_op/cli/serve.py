"""``python -m ece408_op serve``: the class's submission service (HTTP, the queue in the
database) with its local workers, or with --slurm one Slurm job per queued job. Secrets never on
the command line: the database URL in $ECE408_DB, the instructor's token in its file (made on the
first start) or $ECE408_INSTRUCTOR_TOKEN. ``--detach`` and ``--stop``: ``cli/background.py``."""
import os

from .argtypes import byte_size, count, positive, whole
from .errors import ArgumentParser, run


def _zero_or_positive(kind):
    """The type of numbers 0 or positive, named ``kind`` in argparse's error."""
    def parse(text):
        return 0.0 if float(text) == 0 else positive(text)
    parse.__name__ = kind
    return parse


days = _zero_or_positive("number of days, 0 or more")
rate = _zero_or_positive("number of MiB a second, 0 or more")
TABLE_ENV = "ECE408_FAILURE_TABLE"


def failure_table(parser):
    """$ECE408_FAILURE_TABLE: the addresses the failure limiter holds, smaller than its default (the
    service's budget) only so that tests can fill it; None where unset."""
    text = os.environ.get(TABLE_ENV, "").strip()
    if not text:
        return None
    try:
        return whole(text)
    except ValueError:
        parser.error(f"${TABLE_ENV} must be a positive whole number of addresses, not {text!r}")


def slurm_kind(text):
    from argparse import ArgumentTypeError
    from ..service.slurm import parse_kind
    try:
        return parse_kind(text)
    except ValueError as exc:
        raise ArgumentTypeError(str(exc)) from None


def command(argv):
    from ..grading.sandbox import ENGINES
    from ..service.guard import HEADER_SECONDS
    from ..service.buildstore import KEEP_DAYS, QUOTA_MIB, TOTAL, bytes_text
    from ..service.state import Settings
    from ..service.jobs import Rules
    from ..service.paths import default_db, default_state_dir
    from ..service.server import DEFAULT_PORT, ServeOptions, serve
    from ..service.upload import MAX_UPLOAD
    from ..service.limits import STREAMS_PER_ADDRESS
    from ..service.uploadstore import (IN_FLIGHT_MIB, QUOTA_MIB as UPLOAD_QUOTA_MIB, RANKED_KEEP_DAYS,
                                       RANKED_KEEP_LAST, RANKED_QUOTA_MIB, RATE_MIB, TEAM_QUOTA_MIB)
    rules = Rules()
    parser = ArgumentParser(prog="ece408_op serve",
                            description="The class's submission service: teams submit with 'submit --server', jobs "
                                        "queue in the database, workers run them in their sandboxes, transcripts "
                                        "stream back live. One command on one machine; PostgreSQL ($ECE408_DB) "
                                        "and workers elsewhere, or Slurm, at class scale.")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: put a TLS "
                                                             "reverse proxy in front for other machines)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}")
    parser.add_argument("--db", metavar="PATH", help=f"a SQLite file (default $ECE408_DB, else {default_db()}); a "
                                                     "PostgreSQL URL goes in $ECE408_DB, never here")
    parser.add_argument("--db-connections", type=whole, metavar="N",
                        help="at most N database connections open at once (default $ECE408_DB_CONNECTIONS, else 32 "
                             "for PostgreSQL, 8 for SQLite); keep it under the server's max_connections")
    parser.add_argument("--state-dir", metavar="DIR", help=f"the instructor's token file, Slurm files and build "
                                                            f"folders (default {default_state_dir()})")
    parser.add_argument("--instructor-token-file", metavar="PATH", help="the instructor's token (made, mode 600, "
                                                                        "where missing; default STATE_DIR/instructor.token)")
    parser.add_argument("--workers", type=count, metavar="N",
                        help="local worker processes: one per GPU (default: every GPU, else 1 CPU worker); 0 for "
                             "workers on other machines only")
    parser.add_argument("--engine", choices=("auto", *ENGINES), help="the local workers' sandbox (default auto)")
    parser.add_argument("--scratch", metavar="DIR", help="the local workers' scratch folder (default $TMPDIR)")
    parser.add_argument("--hidden-model", metavar="PREFIX", help="the local workers' hidden third model (ranked runs)")
    parser.add_argument("--ranked-per-hour", type=count, default=rules.ranked_per_hour, metavar="N",
                        help=f"ranked runs a team may submit per hour (default {rules.ranked_per_hour})")
    parser.add_argument("--development-per-hour", type=count, default=rules.development_per_hour, metavar="N",
                        help=f"development runs a team may submit per hour (default {rules.development_per_hour})")
    parser.add_argument("--max-waiting", type=count, default=rules.max_waiting, metavar="N",
                        help=f"jobs a team may have waiting (default {rules.max_waiting})")
    parser.add_argument("--job-timeout", type=positive, default=rules.job_timeout, metavar="SECONDS",
                        help=f"time limit of a job (default {rules.job_timeout:g})")
    parser.add_argument("--lease", type=positive, default=rules.lease, metavar="SECONDS",
                        help=f"a worker silent this long loses its job (back to the queue once; default {rules.lease:g})")
    parser.add_argument("--max-upload", type=positive, default=MAX_UPLOAD / 2**20, metavar="MIB",
                        help=f"largest upload, compressed (default {MAX_UPLOAD / 2**20:g} MiB)")
    parser.add_argument("--keep-builds", type=days, default=KEEP_DAYS, metavar="DAYS",
                        help=f"days a development run's build folder is kept for 'jobs download' (default "
                             f"{KEEP_DAYS:g}; 0: none kept), under STATE_DIR/builds")
    parser.add_argument("--build-quota", type=positive, default=QUOTA_MIB, metavar="MIB",
                        help=f"MiB of build folders kept per team; past it its oldest are deleted (default "
                             f"{QUOTA_MIB})")
    parser.add_argument("--upload-bytes-in-flight", type=positive, default=IN_FLIGHT_MIB, metavar="MIB",
                        help=f"MiB of uploads received and checked at once on the whole server; past it an upload "
                             f"is answered 503 with Retry-After before its body is read (default {IN_FLIGHT_MIB})")
    parser.add_argument("--upload-rate", type=rate, default=RATE_MIB, metavar="MIB",
                        help=f"MiB a second at which all uploads together are received; a faster storm of uploads "
                             f"waits (TCP holds its clients) so that the other requests keep their cores (default "
                             f"{RATE_MIB:g}; 0: no bound)")
    parser.add_argument("--team-upload-quota", type=positive, default=TEAM_QUOTA_MIB, metavar="MIB",
                        help=f"MiB of development uploads a team may have waiting or running (default "
                             f"{TEAM_QUOTA_MIB})")
    parser.add_argument("--upload-quota", type=positive, default=UPLOAD_QUOTA_MIB, metavar="MIB",
                        help=f"MiB of development uploads waiting or running, all teams (default "
                             f"{UPLOAD_QUOTA_MIB})")
    parser.add_argument("--ranked-upload-quota", type=positive, default=RANKED_QUOTA_MIB, metavar="MIB",
                        help=f"MiB of ranked uploads waiting, running and kept, all teams; the oldest kept go "
                             f"first (default {RANKED_QUOTA_MIB})")
    parser.add_argument("--keep-ranked-uploads", type=positive, default=RANKED_KEEP_DAYS, metavar="DAYS",
                        help=f"days a ranked run's upload is kept (a team's last {RANKED_KEEP_LAST} longer; default "
                             f"{RANKED_KEEP_DAYS:g}), under STATE_DIR/uploads")
    parser.add_argument("--build-folders-total", type=byte_size, default=TOTAL, metavar="BYTES",
                        help=f"bytes of build folders kept for all teams together (500M, 20G...); past it the "
                             f"oldest are deleted, whoever's they are, and a larger archive is refused (default "
                             f"{bytes_text(TOTAL)})")
    parser.add_argument("--max-failures", type=count, default=20, metavar="N",
                        help="failed token checks an address (IPv6: a /64) may make per minute (default 20)")
    parser.add_argument("--max-failures-total", type=count, metavar="N",
                        help="failed token checks all addresses together may make per minute (default 10 x "
                             "--max-failures): a guesser with many addresses gets no more")
    parser.add_argument("--streams-per-address", type=count, default=STREAMS_PER_ADDRESS, metavar="N",
                        help=f"live streams one client address may hold (default {STREAMS_PER_ADDRESS}: a campus "
                             "behind one NAT address; 0: no cap); a team holds 16 at most")
    parser.add_argument("--names", choices=("unicode", "ascii"), default="unicode",
                        help="the rule of team names: unicode (default: PRECIS usernames, one script, no look-alike "
                             "of another team's by Unicode's confusables) or ascii (A-Z a-z 0-9 . _ - only)")
    parser.add_argument("--forwarded-allow-ips", metavar="ADDRESSES",
                        help="behind a reverse proxy: its address(es), whose X-Forwarded-For is believed")
    parser.add_argument("--slurm", action="store_true", help="run each queued job as a Slurm job (worker --once)")
    parser.add_argument("--partition", help="--slurm: the partition")
    parser.add_argument("--account", help="--slurm: the account")
    parser.add_argument("--gres", default="gpu:1", help="--slurm: the GPU request of GPU jobs (default gpu:1; "
                                                        "'none' on a cluster without GPUs)")
    parser.add_argument("--slurm-kind", type=slurm_kind, action="append", default=[],
                        metavar="KIND=partition:P,gres:G,constraint:C",
                        help="--slurm: where the jobs asking for device kind KIND (submit --gpu; the name its nodes "
                             "report, e.g. 'NVIDIA H100 80GB HBM3') go: any of a partition, a gres for its GPU jobs "
                             "(default --gres), a constraint; once per kind. A kind no mapping names is refused at "
                             "submission (unless a worker of that kind asks for work) and never sent to Slurm")
    parser.add_argument("--slurm-time", default="01:00:00", metavar="D-HH:MM:SS", help="--slurm: each job's limit")
    parser.add_argument("--slurm-max-jobs", type=count, default=8, metavar="N",
                        help="--slurm: this service's worker jobs in Slurm at once (default 8)")
    parser.add_argument("--header-timeout", type=positive, default=HEADER_SECONDS, metavar="SECONDS",
                        help=f"close a connection whose request headers have not all arrived in this time (default "
                             f"{HEADER_SECONDS:g})")
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    background = parser.add_mutually_exclusive_group()
    background.add_argument("--detach", action="store_true",
                            help="run in the background (its log and process id in STATE_DIR) and return once it "
                                 "answers, or say in one line why it did not start")
    background.add_argument("--stop", action="store_true",
                            help="stop the service --detach started on --port, and wait until it has exited")
    parser.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")
    args = parser.parse_args(argv)
    if args.stop or args.detach:
        from ..service.server import bind
        from . import background as bg
        state_dir = args.state_dir or default_state_dir()
        if args.stop:
            return bg.stop(args.port, state_dir)
        hint = bg.stop_command(args.port, args.state_dir, DEFAULT_PORT, args.state_dir is not None)
        return bg.detach(argv, args.host, args.port, state_dir, hint, bind)
    if args.db and args.db.startswith(("postgresql://", "postgres://")):
        parser.error("a PostgreSQL URL holds a password: put it in $ECE408_DB (or the password in ~/.pgpass), not "
                     "on the command line, which every user of this machine can read in ps")
    if args.upload_bytes_in_flight < args.max_upload:
        parser.error(f"--upload-bytes-in-flight {args.upload_bytes_in_flight:g} is less than --max-upload "
                     f"{args.max_upload:g}: an upload of the largest size would never be received")
    if args.slurm and args.workers:
        parser.error("--slurm runs the workers as Slurm jobs: leave --workers out")
    if args.slurm_kind and not args.slurm:
        parser.error("--slurm-kind maps a device kind to Slurm's requests: it goes with --slurm")
    worker_args = []
    for flag, value in (("--engine", args.engine), ("--scratch", args.scratch), ("--hidden-model", args.hidden_model)):
        if value:
            worker_args += [flag, value]
    rules = Rules(ranked_per_hour=args.ranked_per_hour, development_per_hour=args.development_per_hour,
                  max_waiting=args.max_waiting, job_timeout=args.job_timeout, lease=args.lease)
    settings = Settings(rules=rules, max_upload=int(args.max_upload * 2**20), max_failures=args.max_failures,
                        max_failures_total=args.max_failures_total, failure_table=failure_table(parser),
                        keep_builds=args.keep_builds * 86400, build_quota=int(args.build_quota * 2**20),
                        build_total=args.build_folders_total,
                        streams_per_address=args.streams_per_address, names=args.names,
                        upload_bytes_in_flight=int(args.upload_bytes_in_flight * 2**20),
                        upload_rate=int(args.upload_rate * 2**20),
                        team_upload_quota=int(args.team_upload_quota * 2**20),
                        upload_quota=int(args.upload_quota * 2**20),
                        ranked_upload_quota=int(args.ranked_upload_quota * 2**20),
                        keep_ranked_uploads=args.keep_ranked_uploads * 86400)
    slurm = None
    if args.slurm:
        from ..service.slurm import SlurmOptions, check_kinds
        try:
            kinds = check_kinds(args.slurm_kind)
        except ValueError as exc:
            parser.error(str(exc))
        slurm = SlurmOptions(partition=args.partition, account=args.account, gres=args.gres, time=args.slurm_time,
                             max_jobs=args.slurm_max_jobs, worker_args=worker_args, kinds=kinds)
    options = ServeOptions(host=args.host, port=args.port, db=args.db, db_connections=args.db_connections,
                           state_dir=args.state_dir,
                           instructor_token_file=args.instructor_token_file, workers=args.workers,
                           worker_args=worker_args, settings=settings, forwarded_allow_ips=args.forwarded_allow_ips,
                           header_seconds=args.header_timeout, log_level=args.log_level, slurm=slurm)
    return serve(options)


def main(argv):
    return run(command, argv)

"""The service's client on the command line: ``submit`` and ``ranking`` on the class's service
(``cli.main`` hands them over here, before their local modules are imported, where ``where``
says so), and the options every client command shares. The HTTP is ``client/api.py``; nothing
here needs MXNet, a GPU or a sandbox."""
import os

from ..base.extras import runs_here
from ..base.terms import DEFAULT_SIZE
from ..course import RANKED as MILESTONES
from .errors import ArgumentParser, run
from .teamargs import check_size, team_folder

SERVER_ENV = "ECE408_SERVER"
LOCAL = "--local"
LOCAL_ONLY = {"submit": ("--engine", "--image", "--timeout", "--memory", "--processes", "--cpu-time", "--disk",
                         "--max-output", "--scratch", "--hidden-model", "--repeats", "--db", "--keep-scratch",
                         "--allow-network", "--name"),
              "ranking": ("--db", "--options")}
# The rule, said once in each command's --help and in the README
RULE = {"submit": "Where it runs: on the class's service with --server URL or $ECE408_SERVER, after 'login', and "
                  "always on a client-only install; otherwise here, each command in a sandbox (--local: here even "
                  "when logged in).",
        "ranking": "Whose ranking: the class's service's with --server URL or $ECE408_SERVER, after 'login', and "
                   "always on a client-only install; otherwise the records stored here (--local: those even when "
                   "logged in)."}


def _given(argv, flag):
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def where(argv):
    """(the service or not, why) for ``submit``/``ranking``'s command line ``argv``: ``RULE``.
    ``why`` is what decided: --local, --server, $ECE408_SERVER, 'login' or 'client-only'."""
    if LOCAL in argv:
        return False, LOCAL
    if _given(argv, "--server"):
        return True, "--server"
    if os.environ.get(SERVER_ENV):
        return True, f"${SERVER_ENV}"
    if not runs_here():
        return True, "client-only"
    from ..client.api import saved_login
    return (True, "login") if saved_login() else (False, "")


def refuse_local_options(parser, name, argv, why):
    """A usage error for the options only a local run takes, saying why this one goes to the service."""
    local = sorted({a.split("=")[0] for a in argv if a.split("=")[0] in LOCAL_ONLY[name]})
    if not local:
        return
    them = "it" if len(local) == 1 else "them"
    if why == "login":
        from ..client.api import saved_login
        fix = (f"you are logged in to {saved_login()['server']}, so this goes to the service: leave {them} out, "
               f"or add --local to run it here")
    elif why == "client-only":
        fix = f"this install goes to the service (it has no local runs: the mxnet extra is not installed); leave {them} out"
    else:
        fix = f"the service decides how runs are made; leave {them} out (or run here: without {why}, or with --local)"
    parser.error(f"{', '.join(local)}: {fix}")


def add_client_options(parser):
    parser.add_argument("--server", metavar="URL",
                        help=f"the service (default ${SERVER_ENV}, else the one 'login' saved)")
    parser.add_argument("--token-file", metavar="PATH",
                        help="the file holding your token (default: $ECE408_TOKEN, $ECE408_TOKEN_FILE, else the "
                             "one 'login' saved for this server)")
    parser.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")


def connect(args, preferred_files=()):
    from ..client import api as client
    return client.connect(args.server, args.token_file, preferred_files)


def submit(argv, why):
    parser = ArgumentParser(prog="ece408_op submit",
                            description="Send a submission to the class's service and follow it: a development run "
                                        "of rai_build.yml, or with --submit a ranked run of the team's forward. The "
                                        "transcript streams back as the worker produces it; Ctrl-C detaches. "
                                        + RULE["submit"])
    parser.add_argument("folder", nargs="?", help="the team's folder (default: --team, else this folder)")
    parser.add_argument("--team", metavar="DIR", help="the team's folder (default: this folder)")
    parser.add_argument("--submit", choices=MILESTONES, metavar="{m2,m3,final}",
                        help="a ranked run: uploads new-forward.py (m2) or new-forward.cu + launch.py (m3, final) only")
    parser.add_argument("--size", type=int, metavar="N", help=f"with --submit: images per run, 1-10000 "
                                                              f"(default {DEFAULT_SIZE})")
    parser.add_argument("--gpu", metavar="KIND",
                        help="run on this device kind where the class has several: its name as the workers report "
                             "it ('NVIDIA H100 80GB HBM3'), or the first characters of it or of one of its words "
                             "('H100'); python -m ece408_op kinds lists them (not with --submit m2: the CPU's run)")
    parser.add_argument("--detach", action="store_true", help="queue the job and return (jobs show ID --follow)")
    parser.add_argument("--dry-run", action="store_true",
                        help="list what would be sent (each file and its size, what is left out and why) and send "
                             "nothing: no service or token needed")
    add_client_options(parser)
    refuse_local_options(parser, "submit", argv, why)
    args = parser.parse_args(argv)
    folder = team_folder(parser, args)
    if args.submit is None and args.size is not None:
        parser.error("--size goes with --submit")
    if args.gpu is not None and args.submit == "m2":
        parser.error("--gpu goes with --submit m3, final or a development run: m2 is measured on the CPU (and ranked "
                     "by the CPU's kind)")
    size = DEFAULT_SIZE if args.size is None else args.size
    check_size(parser, size)
    from ..client import api as client
    if args.dry_run:
        return client.dry_run(folder, args.submit)
    return client.submit(connect(args), folder, args.submit, size if args.submit else None, args.detach, args.gpu)


def ranking(argv, why):
    parser = ArgumentParser(prog="ece408_op ranking",
                            description="The class's ranking on the service: teams by their fastest valid total Op "
                                        "Time, one row per team, one table per device kind. " + RULE["ranking"])
    parser.add_argument("--milestone", choices=MILESTONES, help="default: the newest record's")
    parser.add_argument("--size", type=int, metavar="N", help="images per run (default: the newest record's)")
    parser.add_argument("--device", metavar="KIND", help="one device kind's table only (its name, or the first characters "
                                                         "of it or of one of its words); default: every kind's")
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--csv", action="store_true", help="CSV instead of a table")
    form.add_argument("--json", action="store_true", help="JSON instead of a table")
    add_client_options(parser)
    refuse_local_options(parser, "ranking", argv, why)
    args = parser.parse_args(argv)
    from ..client import api as client
    fmt = "csv" if args.csv else "json" if args.json else "table"
    return client.ranking(connect(args), args.milestone, args.size, fmt, args.device)


def main(name, argv, why):
    """The service's form of the command ``name`` (``submit`` or ``ranking``), chosen for ``why``."""
    return run(lambda a: {"submit": submit, "ranking": ranking}[name](a, why), argv)

"""``python -m ece408_op init DIR``: a team project from the task's template (tasks/conv/template/)."""
import os
import shlex

from ..team import project
from .errors import ArgumentParser, run


def command(argv):
    parser = ArgumentParser(prog="ece408_op init",
                            description="Make a team project: your CPU forward (new-forward.py), your CUDA kernels "
                                        "(new-forward.cu) and how they launch (launch.py), rai_build.yml and a "
                                        "README. The forwards are simple and correct: run them first.")
    parser.add_argument("folder", help="the new project's folder (new, or empty)")
    parser.add_argument("--restore", action="store_true",
                        help="into an existing team folder: write only the template's files it lacks (a deleted "
                             "new-forward.py), keeping every file it has")
    parser.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")
    args = parser.parse_args(argv)
    written = project.init(args.folder, restore=args.restore)
    if args.restore:
        print(f"Restored in {args.folder}: " + (", ".join(p.name for p in written) or "nothing (no file was missing)"))
        return 0
    print(f"Team project made in {args.folder}: " + ", ".join(p.name for p in written))
    print(next_step(args.folder))
    return 0


def next_step(folder):
    """The line after ``init``: a command that runs on this install. With MXNet: the CPU milestone
    here; on a client-only install (a laptop): the ranked run on the class's service, after a login
    where none was saved."""
    from . import program_name
    from ..base.extras import runs_here
    prog, where = program_name(), shlex.quote(str(folder))
    if runs_here():
        return f"Next: cd {where} && {prog} m2 1000   (then m3, final; see its README.md)"
    from ..client.api import saved_login
    login = "" if saved_login() or os.environ.get("ECE408_SERVER") else f"{prog} login --server URL && "
    return (f"Next: {login}cd {where} && {prog} submit --submit m2 --size 100   (on the class's service: this "
            "install runs no milestone here; see its README.md)")


def main(argv):
    return run(command, argv)

"""``python -m ece408_op init DIR``: a team project from the task's template (tasks/conv/template/)."""
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
    print(f"Next: cd {args.folder} && python -m ece408_op m2 1000   (then m3, final; see its README.md)")
    return 0


def main(argv):
    return run(command, argv)

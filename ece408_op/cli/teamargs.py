"""The team's folder and the size of a run: the arguments ``submit`` and its ``--server`` form share."""
import os


def check_size(parser, size):
    if not 1 <= size <= 10000:
        parser.error(f"--size must be from 1 to 10000, not {size}")


def team_folder(parser, args):
    """The team's folder: FOLDER or --team (given once), else this folder; a usage error where it
    is not a folder."""
    if args.folder is not None and args.team is not None and \
            os.path.realpath(args.folder) != os.path.realpath(args.team):
        parser.error(f"give the team's folder once: FOLDER {args.folder!r} and --team {args.team!r} differ")
    folder = args.folder or args.team or "."
    if not os.path.isdir(folder):
        parser.error(f"{folder}: no such folder; give the team's folder (python -m ece408_op init DIR makes one)")
    return folder

"""``python -m ece408_op teams``: the class on the service (the instructor's token). New tokens
are shown once: printed (``NAME<TAB>TOKEN``) or written to --token-dir, one file of mode 600 each;
``teams import`` always writes files, made before its teams are (client/importer.py).
On the server's own machine the instructor's token file that ``serve`` made is found by itself."""
from .errors import ArgumentParser, run
from .remote import add_client_options, connect


def instructor_connect(args):
    from ..service.paths import instructor_token_file
    return connect(args, preferred_files=[instructor_token_file()] if loopback_server(args) else [])


def loopback_server(args):
    from urllib.parse import urlsplit

    from ..client import api as client
    try:
        return client.loopback(urlsplit(client.resolve_server(args.server)).hostname or "")
    except client.ClientError:
        return False


def command(argv):
    parser = ArgumentParser(prog="ece408_op teams", description="Teams and their tokens on the service "
                                                                "(the instructor's token).")
    sub = parser.add_subparsers(dest="action", required=True, metavar="{add,import,list,revoke,rotate,worker}")
    add = sub.add_parser("add", help="add teams; each new token is shown once")
    add.add_argument("names", nargs="+", metavar="NAME")
    roster = sub.add_parser("import", help="add the teams of a roster CSV (its 'team' column, else the first), all "
                                           "or none; teams already there are left as they are; run it again "
                                           "where an answer was lost: it completes the import")
    roster.add_argument("roster", metavar="ROSTER.csv")
    roster.add_argument("--token-dir", metavar="DIR", help="the folder of the token files, NAME.token (mode 600), "
                                                           "written before the teams are made (default: "
                                                           "ROSTER-tokens beside the roster)")
    sub.add_parser("list", help="every team, its token's state, its jobs")
    revoke = sub.add_parser("revoke", help="revoke a team's token (rotate gives it a new one)")
    revoke.add_argument("name", metavar="NAME")
    rotate = sub.add_parser("rotate", help="a new token for a team; the old one stops working")
    rotate.add_argument("name", metavar="NAME")
    worker = sub.add_parser("worker", help="a token for a worker on another machine (worker --token-file)")
    worker.add_argument("name", metavar="NAME")
    worker.add_argument("--out", metavar="PATH", help="write it to this file (mode 600) instead of printing it")
    for p in (add, rotate):
        p.add_argument("--token-dir", metavar="DIR", help="write each token to DIR/NAME.token (mode 600) instead "
                                                          "of printing it")
    for p in sub.choices.values():
        add_client_options(p)
    args = parser.parse_args(argv)
    from ..client import instructor as instructor_client
    from ..client.importer import import_roster
    c = instructor_connect(args)
    if args.action == "add":
        return instructor_client.add_teams(c, args.names, token_dir=args.token_dir)
    if args.action == "import":
        return import_roster(c, args.roster, args.token_dir)
    if args.action == "list":
        return instructor_client.list_teams(c)
    if args.action == "revoke":
        return instructor_client.revoke_team(c, args.name)
    if args.action == "rotate":
        return instructor_client.rotate_team(c, args.name, args.token_dir)
    return instructor_client.worker_token(c, args.name, args.out)


def main(argv):
    return run(command, argv)

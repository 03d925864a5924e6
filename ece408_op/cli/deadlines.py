"""``python -m ece408_op deadlines``: milestone deadlines on the service. After a milestone's
deadline its ranked runs are refused, the deadline in the message; development runs go on."""
from .errors import ArgumentParser, run
from .remote import add_client_options
from .teams import instructor_connect


def command(argv):
    from ..course import RANKED as MILESTONES
    parser = ArgumentParser(prog="ece408_op deadlines", description="Milestone deadlines (setting one needs the "
                                                                    "instructor's token).")
    sub = parser.add_subparsers(dest="action", required=True, metavar="{list,set,clear}")
    sub.add_parser("list", help="the deadlines")
    put = sub.add_parser("set", help="set a milestone's deadline")
    put.add_argument("milestone", choices=MILESTONES)
    put.add_argument("time", metavar="TIME", help="ISO 8601 with its zone, e.g. 2026-12-04T23:59:00-06:00")
    clear = sub.add_parser("clear", help="remove a milestone's deadline")
    clear.add_argument("milestone", choices=MILESTONES)
    for p in sub.choices.values():
        add_client_options(p)
    args = parser.parse_args(argv)
    from ..client import instructor as instructor_client
    c = instructor_connect(args)
    if args.action == "set":
        return instructor_client.set_deadline(c, args.milestone, args.time)
    if args.action == "clear":
        return instructor_client.set_deadline(c, args.milestone, None)
    return instructor_client.list_deadlines(c)


def main(argv):
    return run(command, argv)

"""``python -m ece408_op kinds``: the device kinds on the service. Runs are ranked per kind (the
device's name as its machine reports it); a team may ask for one (``submit --gpu``); the
instructor says which kind counts for each milestone's grade, and whether a team may ask for a
kind no worker has reported."""
from .errors import ArgumentParser, run
from .remote import add_client_options
from .teams import instructor_connect


def command(argv):
    from ..course import RANKED as MILESTONES
    parser = ArgumentParser(prog="ece408_op kinds", description="Device kinds on the service (choosing one needs the "
                                                                "instructor's token).")
    sub = parser.add_subparsers(dest="action", required=True, metavar="{list,grade,unknown}")
    sub.add_parser("list", help="the workers' and the runs' kinds, the kind each grade counts")
    grade = sub.add_parser("grade", help="the kind whose runs count for a milestone's grade (the CSV's grade column)")
    grade.add_argument("milestone", choices=MILESTONES)
    grade.add_argument("kind", nargs="?", metavar="KIND",
                       help="its name, or the first characters of it or of one of its words ('H100')")
    grade.add_argument("--clear", action="store_true", help="no kind chosen for this milestone")
    unknown = sub.add_parser("unknown", help="whether a team may ask for a GPU kind no worker has reported")
    unknown.add_argument("choice", choices=("refused", "accepted"))
    for p in sub.choices.values():
        add_client_options(p)
    args = parser.parse_args(argv)
    if args.action == "grade" and (args.kind is None) == (not args.clear):
        parser.error("give the KIND, or --clear")
    from ..client import instructor as instructor_client
    c = instructor_connect(args)
    if args.action == "grade":
        return instructor_client.set_grading_kind(c, args.milestone, args.kind)
    if args.action == "unknown":
        return instructor_client.set_unknown_gpus(c, args.choice)
    return instructor_client.list_kinds(c)


def main(argv):
    return run(command, argv)

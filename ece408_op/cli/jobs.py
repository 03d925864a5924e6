"""``python -m ece408_op jobs list|show|cancel|download``: a team's jobs on the class's service."""
from .errors import ArgumentParser, run
from .remote import add_client_options, connect


def command(argv):
    parser = ArgumentParser(prog="ece408_op jobs", description="Your team's jobs on the service (the instructor's "
                                                               "token: every team's).")
    sub = parser.add_subparsers(dest="action", required=True, metavar="{list,show,cancel,download}")
    listing = sub.add_parser("list", help="the newest jobs first")
    listing.add_argument("--team", help="instructor: one team's jobs")
    listing.add_argument("--limit", type=int, default=50, metavar="N", help="at most N jobs (default 50)")
    show = sub.add_parser("show", help="a job's transcript and state; --follow: live, to its end")
    show.add_argument("job", metavar="ID")
    show.add_argument("--follow", action="store_true", help="follow it live (Ctrl-C detaches again)")
    cancel = sub.add_parser("cancel", help="cancel a job (a running one is stopped by its worker)")
    cancel.add_argument("job", metavar="ID")
    download = sub.add_parser("download", help="a development run's build folder (its /build at the run's end: "
                                               "binaries, ncu and nsys reports), while the service keeps it")
    download.add_argument("job", metavar="ID")
    download.add_argument("-o", "--out", metavar="DIR", help="the folder to unpack it into, new or empty (default "
                                                             "build-ID)")
    for p in (listing, show, cancel, download):
        add_client_options(p)
    args = parser.parse_args(argv)
    from ..client import api as client
    c = connect(args)
    if args.action == "list":
        return client.listing(c, args.team, args.limit)
    if args.action == "show":
        return client.show(c, args.job, args.follow)
    if args.action == "download":
        return client.download(c, args.job, args.out)
    return client.cancel(c, args.job)


def main(argv):
    return run(command, argv)

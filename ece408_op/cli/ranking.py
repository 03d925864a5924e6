"""``python -m ece408_op ranking``: the course's ranking from the stored records."""
import sys

from ..grading.ranking import ranking_report
from ..course import RANKED as MILESTONES
from ..grading.store import DB_ENV, default_sqlite_path, open_store
from .errors import ArgumentParser, run
from .remote import LOCAL, RULE


def command(argv):
    parser = ArgumentParser(prog="ece408_op ranking",
                            description="Teams by their fastest valid total Op Time (every model's Correctness "
                                        "equal to the reference run's), one row per team; only runs measured with "
                                        "the same options (models, hidden model, repeats, engine) on the same kind of "
                                        "device are compared: one table per device kind. " + RULE["ranking"])
    parser.add_argument("--milestone", choices=MILESTONES, help="default: the newest record's")
    parser.add_argument("--size", type=int, metavar="N", help="images per run (default: the newest record's)")
    parser.add_argument("--options", metavar="KEY",
                        help="the option set to rank (its key, or the key's first characters; default: the newest "
                             "set; 'unrecorded': runs stored before options were kept)")
    parser.add_argument("--device", metavar="KIND",
                        help="one device kind's table only: its name as the runs report it (e.g. 'NVIDIA H100 80GB "
                             "HBM3'), or the first characters of it or of one of its words where only one kind has "
                             "them ('H100'); default: every kind's")
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--csv", action="store_true", help="CSV instead of a table (cells a spreadsheet would read as "
                                                        "a formula start with a single quote)")
    form.add_argument("--json", action="store_true", help="JSON instead of a table")
    parser.add_argument("--db", help=f"SQLite path or postgresql:// URL (default ${DB_ENV}, else {default_sqlite_path()})")
    parser.add_argument(LOCAL, action="store_true", help="the records stored here even when logged in to the "
                                                          "class's service")
    parser.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")
    args = parser.parse_args(argv)
    fmt = "csv" if args.csv else "json" if args.json else "table"
    with open_store(args.db) as store:
        report = ranking_report(store, args.milestone, args.size, fmt, args.options, device=args.device)
    print(report.text)
    if report.others and fmt != "table":
        for line in report.others.splitlines():                # the table says it; CSV and JSON stay data
            print(f"note: {line}", file=sys.stderr)
    return 0


def main(argv):
    return run(command, argv)

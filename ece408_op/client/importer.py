"""``teams import ROSTER.csv``: a class's teams, all or nothing, and no token lost.

The new teams' tokens are made here (of the shape the service's own have: ``ece408_<16 hex>_<43
characters>``, from ``secrets``) and each is written to its team's token file (mode 600, never
over another file: ``TokenFiles``), the files synced to disk, before anything is sent; only then does the service create the teams, every one in one
transaction or none (service/imports.py). So:

- no team is ever created whose token is not in its file here;
- an import whose answer was lost (the client stopped or killed, the connection cut, no answer in
  time) is completed by running the same command again: the teams it made are found with their
  files' tokens (already there), the files of those it did not make are sent again, nothing twice;
- a team of the roster that exists without its token file here (made by ``teams add``, or its
  file moved away) is named, in one line: its token is not shown again (``teams rotate NAME``).

Each step is said on stderr (the roster read, its names checked by the service, the files
written, the teams sent, created and in how long); stdout has a line a team created, naming its
token file. A call waits up to IMPORT_TIMEOUT seconds (``$ECE408_IMPORT_TIMEOUT``), not the 60 s
of the other commands: a class of 100,000 takes seconds, and is then refused for its size."""
import json
import os
import secrets
import time
from pathlib import Path

from ..base.names import shown
from ..base.terms import looks_like_token, parse_token
from .api import NOFOLLOW, ClientError, Refusal
from .instructor import token_file_name
from .roster import roster_rows
from .statusline import StatusLine, is_terminal

IMPORT_TIMEOUT_ENV = "ECE408_IMPORT_TIMEOUT"
IMPORT_TIMEOUT = 600.0               # seconds a call of the import waits for its answer
SYNC_EACH = not hasattr(os, "sync")  # Windows: each file synced as it is written (no sync of them all)
LISTED = 5                           # names a line lists before "and N more"


def import_timeout():
    text = os.environ.get(IMPORT_TIMEOUT_ENV, "").strip()
    if not text:
        return IMPORT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise ClientError(f"${IMPORT_TIMEOUT_ENV}={text!r}: the seconds an import waits for the service, more than 0")
    return value


def default_token_dir(roster):
    """``ROSTER-tokens`` beside the roster (``class.csv``: ``class-tokens``)."""
    roster = Path(roster)
    return roster.with_name(f"{roster.stem}-tokens")


def teams_count(n):
    return f"{n:,} team" + ("" if n == 1 else "s")


def new_token():
    return f"ece408_{secrets.token_hex(8)}_{secrets.token_urlsafe(32)}"


def kept_token(path):
    """The token of the file ``path`` (an earlier try's); None where the file holds nothing (a try
    killed as it wrote it); ClientError where it holds something else (or is a link)."""
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    except OSError as exc:
        raise ClientError(f"cannot read the token file {path}: {exc.strerror or exc}; nothing was imported") from None
    try:
        with os.fdopen(fd, encoding="utf-8-sig") as f:
            text = f.read(4096).strip()
    except (OSError, UnicodeDecodeError):
        text = None
    if text == "":
        return None
    if text is None or not looks_like_token(text):
        raise ClientError(f"{path} is there and holds no token of this service; move it away and run the import "
                          "again (nothing was imported)")
    return text


class TokenFiles:
    """The token folder's files, written one syscall each past their creation: a file is created
    (O_EXCL: never over another, mode 600) and its token written in one ``write``, so that a try
    killed meanwhile leaves at worst an empty file, which the next try writes again. 100,000 files
    cost a create and a write each, no more (a file written aside and linked into place cost three
    times as long on a busy disk here)."""

    def __init__(self, folder):
        self.folder = folder
        self.names = {entry.name for entry in os.scandir(folder)}      # one listing, not a look a file
        umask = os.umask(0o077)
        os.umask(umask)
        self.chmod = bool(umask & 0o600)          # a umask that takes the owner's bits: set them again

    def kept(self, name):
        """The token of an earlier try's file ``name``, None where there is none (or it is empty)."""
        return kept_token(self.folder / name) if name in self.names else None

    def write(self, name, token):
        path = self.folder / name
        flags = os.O_WRONLY | os.O_CREAT | NOFOLLOW | (os.O_TRUNC if name in self.names else os.O_EXCL)
        fd = os.open(path, flags, 0o600)          # O_TRUNC only over an empty file (kept() said so)
        try:
            if self.chmod:
                os.chmod(path, 0o600)
            os.write(fd, (token + "\n").encode("ascii"))
            if SYNC_EACH:
                os.fsync(fd)
        finally:
            os.close(fd)
        return path


def listed(names):
    more = len(names) - LISTED
    return ", ".join(shown(n, 60) for n in names[:LISTED]) + (f" and {more:,} more" if more > 0 else "")


def call(client, path, body, timeout):
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    answer = client.request("POST", path, content=data, headers={"Content-Type": "application/json"},
                            timeout=client.httpx.Timeout(timeout, connect=15.0))
    return answer.json()


def mib(n):
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{max(1, round(n / 1024))} KiB"


def import_roster(client, roster, token_dir=None):
    """``teams import``: the roster's teams that do not exist yet, made with their token files
    (see the module docstring); 0, or ClientError (one line, the roster's line where one is at fault)."""
    started = time.monotonic()
    rows = roster_rows(roster)
    folder = Path(token_dir) if token_dir is not None else default_token_dir(roster)
    lines, names = [line for line, _ in rows], [name for _, name in rows]
    timeout = import_timeout()
    client.note(f"* {roster}: {teams_count(len(rows))}; checking them with the service")
    try:
        checked = call(client, "/api/admin/teams/import/check", {"names": names, "lines": lines}, timeout)
    except Refusal as exc:
        raise ClientError(refused(roster, exc)) from None
    stored = checked["names"]
    existing = {int(i): set(ids) for i, ids in checked["existing"]}
    if len(stored) != len(rows):
        raise ClientError("the service answered another number of names than the roster has; nothing was imported")
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise ClientError(f"cannot make the token folder {folder}: {exc.strerror or exc}; nothing was imported") from None
    wrote = time.monotonic()
    files = TokenFiles(folder)
    made, kept, there, without, sent = [], 0, 0, [], []
    for i, name in enumerate(stored):
        file_name = token_file_name(name)
        token = files.kept(file_name)
        if i in existing:
            if token is not None and parse_token(token)[0] in existing[i]:
                there += 1
            else:
                without.append(name)
            continue
        if token is None:
            token = new_token()
            try:
                path = files.write(file_name, token)
            except OSError as exc:
                raise ClientError(f"cannot write the token file {folder / file_name}: {exc.strerror or exc}; "
                                  "nothing was imported (run the import again once it can be written)") from None
            made.append(path)
        else:
            kept += 1
            path = folder / file_name
        sent.append((i, token, path))
    if made and not SYNC_EACH:
        os.sync()                                  # every token on disk before any team exists
    if sent:
        client.note(f"* {len(made):,} token files written to {folder} (mode 600)"
                    + (f", {kept:,} kept from an earlier try" if kept else "") + f" in {time.monotonic() - wrote:.1f} s")
    if there:
        client.note(f"* {teams_count(there)} of the roster already there, their tokens in {folder}")
    if without:
        client.note(f"* {teams_count(len(without))} of the roster {'exists' if len(without) == 1 else 'exist'} "
                    f"already without a token file in "
                    f"{folder}: {listed(without)}; a token is shown once (teams rotate NAME gives one a new token)")
    if not sent:
        client.note(f"* Nothing to create: every team of {roster} exists")
        return 0
    done = create(client, roster, folder, names, lines, sent, made, timeout)
    for i, _, path in sent:
        client.out.write(f"{shown(stored[i])}: token written to {path}\n")
    client.out.flush()
    late = f"; {teams_count(done['already'])} made meanwhile by another try" if done.get("already") else ""
    client.note(f"* {teams_count(done['created'])} created in {time.monotonic() - started:.1f} s (the service "
                f"took {done['seconds']:.1f} s){late}; their tokens are in {folder}")
    return 0


def refused(roster, exc):
    text = str(exc)
    return f"the roster {roster}, {text}" if text.startswith(("line ", "lines ")) else f"the roster {roster}: {text}"


def create(client, roster, folder, names, lines, sent, made, timeout):
    """Send the new teams (``sent``: row, token, file; ``names`` as the roster has them) and wait
    for the service to create them; the answer. Where the service refused (nothing was created),
    the files this try made go again; where no answer came, they stay, for the next try to send."""
    body = {"names": [names[i] for i, _, _ in sent], "lines": [lines[i] for i, _, _ in sent],
            "tokens": [token for _, token, _ in sent]}
    size = len(json.dumps(body, ensure_ascii=False).encode("utf-8"))
    client.note(f"* {teams_count(len(sent))}: sending ({mib(size)}); the service creates them all in one "
                f"transaction, or none (waiting up to {timeout:g} s)")
    status = None
    if is_terminal(client.err):
        status = StatusLine(client.out, client.err, terminal=True)
        status.progress({"started_at": time.time(), "step": "the service is creating the teams"})
    try:
        return call(client, "/api/admin/teams/import", body, timeout)
    except Refusal as exc:
        if exc.status < 500:
            for path in made:
                path.unlink(missing_ok=True)
        raise ClientError(refused(roster, exc)) from None
    except ClientError as exc:
        raise ClientError(f"no answer to the import ({exc}); the teams may have been created or not: run the same "
                          f"command again, which completes it (their tokens are in {folder})") from None
    finally:
        if status is not None:
            status.close()

"""What an upload leaves out of a team's folder: one set of rules for the client that packs it
and for any side that walks a team's files (standard library only, nothing of the grader: the
client imports it on a laptop).

Left out by default, each with its reason (``DEFAULTS``):

    tokens     *.token, tokens/; and any file whose bytes hold a token of the service
               (``holds_token``): never sent, whatever .ece408ignore says
    databases  *.db, *.db-journal, *.db-wal, *.db-shm, *.sqlite* (a class.db or service.db of
               the README's commands)
    version    .git, .hg, .svn
    venvs      .venv/, venv/, and any folder holding pyvenv.cfg
    caches     __pycache__/, *.pyc, .pytest_cache/, .mypy_cache/, .ruff_cache/, .ipynb_checkpoints/
    editors    .DS_Store, *~, *.swp, *.swo, #*#, .#*
    teams      a sub-folder that is itself a team project (holds rai_build.yml and new-forward.py
               or new-forward.cu): another team's folder, made beside this one by ``init``

Then the folder's own ``.ece408ignore``, read like a .gitignore: one pattern a line, ``#`` starts
a comment line, blank lines skipped; ``*`` matches within one name, ``?`` one character, ``[...]``
a class, ``**`` any number of folders (a whole part only: ``**/x``, ``a/**``, ``a/**/b``); a
pattern with a ``/`` before its end is anchored at the team's folder, one without matches a name
at any depth; a trailing ``/`` matches folders only; ``!`` takes back what an earlier pattern (or
a default: ``!*.db``) left out; ``\\`` makes the next character literal (``\\#``, ``\\!``). The
last pattern that matches decides; a folder left out is not walked (nothing inside it can be
taken back). A line that cannot be read is an IgnoreError naming its number.
"""
import os
import re
import stat

from ..course import CPU_FILES, GPU_FILES
from ..errors import Ece408Error
from .terms import CONFIG_NAME, TOKEN_BYTES

IGNORE_FILE = ".ece408ignore"
MAX_IGNORE_BYTES = 64 << 10
MAX_COUNTED = 100000                   # entries counted inside one folder left out

# reason -> (singular, plural) as the summary counts it, in the summary's order (version control and
# virtual environments are named instead: .git (120 files))
REASONS = {"token": ("token", "tokens"), "database": ("database", "databases"), "version": None, "venv": None,
           "cache": ("cache file", "cache files"), "editor": ("editor or system file", "editor or system files"),
           "team": ("team folder", "team folders"), "ignorefile": (f"by {IGNORE_FILE}", f"by {IGNORE_FILE}"),
           "refused": ("link or name the service refuses", "links or names the service refuses")}
WHY = {"token": "a token or secret: never sent", "database": "a database", "version": "version control",
       "venv": "a virtual environment", "cache": "a cache", "editor": "an editor's or the system's file",
       "team": "another team's folder (it holds rai_build.yml and a new-forward file)"}
DEFAULTS = (("token", ("*.token", "tokens/")),
            ("database", ("*.db", "*.db-journal", "*.db-wal", "*.db-shm", "*.sqlite*")),
            ("version", (".git", ".hg/", ".svn/")),
            ("venv", (".venv/", "venv/")),
            ("cache", ("__pycache__/", "*.pyc", ".pytest_cache/", ".mypy_cache/", ".ruff_cache/",
                       ".ipynb_checkpoints/")),
            ("editor", (".DS_Store", "*~", "*.swp", "*.swo", "#*#", ".#*")))


class IgnoreError(Ece408Error):
    """A .ece408ignore that cannot be read (one line naming the line), or a needed file left out."""

    exit_code = 2


class Pattern:
    """One compiled pattern: ``match(name, is_dir)`` on a ``/``-separated name from the folder."""

    def __init__(self, text, line=0, reason="ignorefile"):
        self.text, self.line, self.reason = text, line, reason
        body = text
        self.negate = body.startswith("!")
        if self.negate:
            body = body[1:]
        self.dir_only = body.endswith("/")
        body = body.rstrip("/")
        anchored = "/" in body
        body = body.lstrip("/")
        if not body:
            raise ValueError("a pattern with no name in it")
        parts = body.split("/")
        pieces = []
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if part == "**":
                pieces.append(".+" if last else "(?:[^/]+/)*")
                continue
            if "**" in part:
                raise ValueError("** stands for whole folders: a part of its own (**/x, a/**, a/**/b)")
            if part in ("", ".", ".."):
                raise ValueError("an empty, . or .. part")
            pieces.append(_translate(part) + ("" if last else "/"))
        self.regex = re.compile(("" if anchored else "(?:[^/]+/)*") + "".join(pieces), re.S)

    def match(self, name, is_dir):
        return (is_dir or not self.dir_only) and self.regex.fullmatch(name) is not None

    def describe(self):
        return f"{IGNORE_FILE} line {self.line} ({self.text})" if self.line else WHY[self.reason]


def _translate(part):
    """The regular expression of one part of a pattern (no ``/`` in it)."""
    out, i = [], 0
    while i < len(part):
        c = part[i]
        if c == "\\":
            if i + 1 == len(part):
                raise ValueError("a \\ at the end of the pattern")
            out.append(re.escape(part[i + 1]))
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = part.find("]", i + 2 if part[i + 1:i + 2] in ("!", "^") else i + 1)
            if end < 0 or end == i + 1:
                raise ValueError("a [ with no ] after it")
            inside = part[i + 1:end]
            negate = inside[:1] in ("!", "^")
            inside = inside[1:] if negate else inside
            if not inside:
                raise ValueError("an empty [] class")
            out.append("[" + ("^" if negate else "") + inside.replace("\\", "\\\\").replace("[", "\\[") + "]")
            i = end + 1
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def parse(text):
    """The Patterns of a .ece408ignore's ``text``; IgnoreError naming the first line that cannot be read."""
    patterns = []
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw[:-1] if raw.endswith("\r") else raw
        if not line.strip() or line.startswith("#"):
            continue
        stripped = line.rstrip(" \t")
        if stripped.endswith("\\") and len(line) > len(stripped):
            stripped = stripped + line[len(stripped)]          # "a\ ": the escaped space is kept
        bad = next((c for c in stripped if ord(c) < 32 or ord(c) == 127), None)
        try:
            if bad is not None:
                raise ValueError(f"the control character {bad!r}")
            if len(stripped) > 1024:
                raise ValueError("longer than 1024 characters")
            patterns.append(Pattern(stripped, number))
        except (ValueError, re.error) as exc:
            shown = stripped if len(stripped) <= 80 else stripped[:79] + "…"
            raise IgnoreError(f"{IGNORE_FILE} line {number}: {exc} in {shown!r}; mend or remove the line "
                              "(patterns are written as in a .gitignore)") from None
    return patterns


DEFAULT_PATTERNS = tuple(Pattern(text, 0, reason) for reason, texts in DEFAULTS for text in texts)


def holds_token(data):
    """Whether the bytes ``data`` hold a token of the service (``ece408_<id>_<secret>``)."""
    return TOKEN_BYTES.search(data) is not None


def _regular(folder, name):
    """Whether ``folder`` (str or bytes) holds a regular file ``name`` (a link is not one)."""
    try:
        return stat.S_ISREG(os.lstat(os.path.join(folder, name if isinstance(folder, str) else
                                                  os.fsencode(name))).st_mode)
    except OSError:
        return False


def is_team_folder(path):
    """Whether the folder at ``path`` is a team project: rai_build.yml and a forward file."""
    return _regular(path, CONFIG_NAME) and any(_regular(path, name) for name in CPU_FILES + GPU_FILES[:1])


class Rules:
    """The defaults and the folder's own .ece408ignore (read when made: IgnoreError where it
    cannot be). ``left_out(parts, is_dir, path)``: why an entry is left out, or None."""

    def __init__(self, folder):
        self.folder = folder = os.fspath(folder)
        self.patterns = ()
        path = os.path.join(folder, IGNORE_FILE if isinstance(folder, str) else os.fsencode(IGNORE_FILE))
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise IgnoreError(f"cannot read {IGNORE_FILE}: {exc.strerror or exc}") from None
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_IGNORE_BYTES:
            raise IgnoreError(f"{IGNORE_FILE} is not a regular file of at most {MAX_IGNORE_BYTES >> 10} KiB")
        try:
            with open(path, "rb") as f:
                text = f.read(MAX_IGNORE_BYTES + 1).decode("utf-8-sig")
        except UnicodeDecodeError:
            raise IgnoreError(f"{IGNORE_FILE} is not UTF-8 text") from None
        except OSError as exc:
            raise IgnoreError(f"cannot read {IGNORE_FILE}: {exc.strerror or exc}") from None
        self.patterns = tuple(parse(text))

    def left_out(self, parts, is_dir, path=None):
        """(reason, words) where the entry at ``parts`` (names from the folder; ``path``: where it
        is, to look inside a folder) is left out, else None."""
        name = "/".join(os.fsdecode(p) for p in parts)
        reason = next((p.reason for p in DEFAULT_PATTERNS if p.match(name, is_dir)), None)
        if reason is None and is_dir and path is not None:
            reason = "venv" if _regular(path, "pyvenv.cfg") else "team" if is_team_folder(path) else None
        why = None if reason is None else (reason, WHY[reason])
        if reason == "token":
            return why                                         # secrets: never taken back
        for pattern in self.patterns:
            if pattern.match(name, is_dir):
                why = None if pattern.negate else (pattern.reason, pattern.describe())
        return why

    def needed(self, names):
        """IgnoreError (one line) where a file of ``names`` the run needs would be left out."""
        for name in names:
            why = self.left_out(name.split("/"), False)
            if why is not None:
                raise IgnoreError(f"{name} is needed by the run, but {why[1]} leaves it out; mend {IGNORE_FILE}"
                                  if why[0] == "ignorefile" else f"{name} is needed by the run, but it is left "
                                  f"out: {why[1]}")


def count_inside(path):
    """(files, folders) under the folder ``path``, links not followed; at most MAX_COUNTED looked at."""
    files = folders = 0
    stack = [path]
    while stack and files + folders < MAX_COUNTED:
        try:
            with os.scandir(stack.pop()) as listing:
                for entry in listing:
                    if entry.is_dir(follow_symlinks=False):
                        folders += 1
                        stack.append(entry.path)
                    else:
                        files += 1
        except OSError:
            continue
    return files, folders


class LeftOut:
    """What a walk left out, for the dry run's list and the upload's one line."""

    def __init__(self):
        self.items = []                # (name, is_dir, files inside (1 for a file), reason, words)

    def add(self, name, is_dir, reason, words, path=None):
        files = count_inside(path)[0] if is_dir and path is not None else (0 if is_dir else 1)
        self.items.append((name, is_dir, files, reason, words))

    @property
    def files(self):
        """Entries left out: a folder counts the files inside it (an empty one counts 1)."""
        return sum(max(item[2], 1) for item in self.items)

    def summary(self):
        """``3 tokens, 2 databases, .git (120 files), 1 team folder: beta/``, or ``nothing``."""
        if not self.items:
            return "nothing"
        phrases = []
        for reason, words in REASONS.items():
            items = [item for item in self.items if item[3] == reason]
            if not items:
                continue
            if words is None:                                  # .git (120 files), .venv (3012 files)
                phrases += [f"{item[0]} ({item[2]} file{'' if item[2] == 1 else 's'})" for item in items[:3]]
                phrases += [f"{len(items) - 3} more"] if len(items) > 3 else []
            elif reason == "team":
                names = ", ".join(item[0] + "/" for item in items[:3]) + (" ..." if len(items) > 3 else "")
                phrases.append(f"{len(items)} {words[len(items) != 1]}: {names}")
            else:
                n = sum(max(item[2], 1) for item in items)
                phrases.append(f"{n} {words[n != 1]}")
        return ", ".join(phrases)

    def line(self):
        """``left out 130 files: 3 tokens, ...``, or ``nothing left out``: the upload's words."""
        n = self.files
        if not self.items:
            return "nothing left out"
        return f"left out {n} file{'' if n == 1 else 's'}: {self.summary()}"

"""The class's roster: the team names of a CSV file, as ``teams import`` reads them.

A header row is one whose cells include a known column name (``team``, ``name``, ``email``,
``netid``...): the names are then its ``team`` column (or ``team name``, ``team_name``, else
``name``), and a header with none of these is refused, naming its columns. Without a header the
names are the first column. A row without that column, or whose name holds a control character
(NUL included), is refused with its line number: nothing of such a roster is sent. A row whose
team cell is empty (a student not in a team yet) is left out."""
import csv
import unicodedata

from .api import ClientError

TEAM_COLUMNS = ("team", "team name", "team_name", "teamname", "name")      # in the order they are taken
HEADER_WORDS = set(TEAM_COLUMNS) | {"email", "e-mail", "mail", "netid", "net id", "id", "uin", "student",
                                    "students", "member", "members", "section", "group"}


def roster_names(path):
    """Team names of a roster CSV (the module docstring says which column); ClientError (one line,
    with the line number where one is at fault) otherwise."""
    return [name for _, name in roster_rows(path)]


def roster_rows(path):
    """(line number, team name) of each team of a roster CSV, as ``roster_names`` reads them."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:      # Excel's "CSV UTF-8" begins with a BOM
            reader = csv.reader(f)
            rows = [(reader.line_num, r) for r in reader if r and any(c.strip() for c in r)]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ClientError(f"cannot read the roster {path}: {exc}") from None
    if not rows:
        raise ClientError(f"the roster {path} has no teams")
    header = [c.strip().lower() for c in rows[0][1]]
    if set(header) & HEADER_WORDS:
        found = [name for name in TEAM_COLUMNS if name in header]
        if not found:
            raise ClientError(f"the roster {path} has a header ({', '.join(c for c in header if c) or 'empty'}) but "
                              f"no team column: name one 'team'")
        column, body = header.index(found[0]), rows[1:]
    else:
        column, body = 0, rows
    names = []
    for line, row in body:
        if len(row) <= column:
            raise ClientError(f"the roster {path}, line {line}: no team column (the team is column {column + 1}; "
                              f"this row has {len(row)}); nothing was imported")
        name = row[column].strip()
        bad = next((c for c in name if unicodedata.category(c) == "Cc"), None)
        if bad is not None:
            raise ClientError(f"the roster {path}, line {line}: the team name holds the control character "
                              f"U+{ord(bad):04X}; nothing was imported")
        if name:
            names.append((line, name))
    if not names:
        raise ClientError(f"the roster {path} has no team names in column {column + 1}")
    return names

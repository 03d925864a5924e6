"""The class's roster: the team names of a CSV file, as ``teams import`` reads them."""
import csv

from .client import ClientError


def roster_names(path):
    """Team names of a roster CSV: its ``team`` column where the header has one, else the first."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:      # Excel's "CSV UTF-8" begins with a BOM
            rows = [r for r in csv.reader(f) if r and any(c.strip() for c in r)]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ClientError(f"cannot read the roster {path}: {exc}") from None
    if not rows:
        raise ClientError(f"the roster {path} has no teams")
    header = [c.strip().lower() for c in rows[0]]
    column = header.index("team") if "team" in header else 0
    body = rows[1:] if "team" in header else rows
    names = [r[column].strip() for r in body if len(r) > column and r[column].strip()]
    if not names:
        raise ClientError(f"the roster {path} has no team names in column {column + 1}")
    return names

"""The instructor's client: what ``teams`` (add, import, list, revoke, rotate, a worker's token),
``deadlines`` and ``kinds`` do over HTTP, with the instructor's token (client.py: the connection, where
the token comes from, errors as one line). New tokens are shown once: printed, or written to
files of mode 600."""
import hashlib
import os
import re
import time
from pathlib import Path

from .api import NOFOLLOW, table
from ..base.names import printable, shown


def token_file_name(name):
    """A team's token file: ``NAME.token`` where the name is letters, digits and ``._-``, else
    ``team+<its SHA-256's first 12 hex>.token`` (a ``+`` no name of the first kind holds: two teams
    never share a file)."""
    if re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$", name):
        return f"{name}.token"
    return f"team+{hashlib.sha256(name.encode()).hexdigest()[:12]}.token"


def write_token(path, token, replace=False):
    """``token`` and a newline in the new file ``path`` (mode 600; a link there is refused);
    FileExistsError where a file is there, unless ``replace`` (a rotated token: the new file is
    written aside, then put in place)."""
    path = Path(path)
    target = path.with_name(f".{path.name}.{os.getpid()}") if replace else path
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(target, 0o600)
    if replace:
        os.replace(target, path)


def hand_out(client, issued, token_dir=None, replace=False):
    """Print each new token once (``NAME<TAB>TOKEN``), or write each to ``token_dir`` (mode 600):
    never over a file that is there (another team's, the instructor's), unless ``replace`` (a
    rotated token over the team's own); where one is there, the token is printed instead."""
    if token_dir is not None:
        Path(token_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
    for item in issued:
        if item.get("skipped"):
            client.note(f"{shown(item['name'])}: exists already; its token is unchanged (teams rotate NAME for "
                        "a new one)")
            continue
        if token_dir is None:
            client.out.write(f"{shown(item['name'])}\t{item['token']}\n")
            continue
        path = Path(token_dir) / token_file_name(item["name"])
        try:
            write_token(path, item["token"], replace)
        except FileExistsError:
            client.note(f"{shown(item['name'])}: {path} exists and is not written over; its token is printed "
                        "here instead")
            client.out.write(f"{shown(item['name'])}\t{item['token']}\n")
            continue
        client.out.write(f"{shown(item['name'])}: token written to {path}\n")
    client.out.flush()


def add_teams(client, names, skip_existing=False, token_dir=None):
    issued = client.request("POST", "/api/admin/teams", json={"names": names, "skip_existing": skip_existing}).json()
    hand_out(client, issued["teams"], token_dir)
    return 0


def list_teams(client):
    teams = client.request("GET", "/api/admin/teams").json()["teams"]
    if not teams:
        client.out.write("No teams yet: python -m ece408_op teams add NAME...\n")
        return 0
    rows = [["team", "token", "jobs", "last job (UTC)"]]
    for t in teams:
        last = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t["last_job"])) if t["last_job"] else "-"
        rows.append([shown(t["name"], 60), "active" if t["active"] else "revoked", str(t["jobs"]), last])
    client.out.write(table(rows))
    return 0


def revoke_team(client, name):
    client.request("POST", "/api/admin/teams/revoke", json={"name": name})
    client.out.write(f"{printable(name)}: token revoked (teams rotate {printable(name)} gives a new one)\n")
    return 0


def rotate_team(client, name, token_dir=None):
    issued = client.request("POST", "/api/admin/teams/rotate", json={"name": name}).json()
    hand_out(client, [issued], token_dir, replace=True)
    return 0


def worker_token(client, name, token_file=None):
    issued = client.request("POST", "/api/admin/workers", json={"name": name}).json()
    if token_file is None:
        client.out.write(issued["token"] + "\n")
    else:
        write_token(token_file, issued["token"], replace=True)
        client.out.write(f"worker {printable(name)}: token written to {token_file}\n")
    return 0


def set_deadline(client, milestone, deadline):
    answer = client.request("PUT", "/api/admin/deadlines", json={"milestone": milestone, "deadline": deadline}).json()
    if deadline is None:
        client.out.write(f"{milestone}: no deadline\n")
    else:
        client.out.write(f"{milestone}: ranked runs accepted until {answer['shown']}\n")
    return 0


def list_deadlines(client):
    found = client.request("GET", "/api/deadlines").json()["deadlines"]
    if not found:
        client.out.write("No deadlines set.\n")
    for d in found:
        client.out.write(f"{d['milestone']}: {d['shown']}\n")
    return 0


def set_grading_kind(client, milestone, name):
    """Count the kind ``name`` names for ``milestone``'s grade (None: none)."""
    answer = client.request("PUT", "/api/admin/settings", json={"grading_kinds": {milestone: name}}).json()
    kind = answer["grading_kinds"].get(milestone)
    client.out.write(f"{milestone}: the grade counts the runs on {printable(kind, 100)}\n" if kind else
                     f"{milestone}: no device kind chosen for the grade\n")
    return 0


def set_unknown_gpus(client, choice):
    client.request("PUT", "/api/admin/settings", json={"unknown_gpus": choice})
    client.out.write(f"a GPU kind no worker reported: {choice}\n")
    return 0


def list_kinds(client):
    data = client.request("GET", "/api/kinds").json()

    def kinds(names):
        return "; ".join(printable(k, 100) for k in names) or "none"
    runs = "; ".join(f"{m} on {kinds(ks)}" for m, ks in data["run_kinds"].items()) or "none yet"
    grading = data["grading_kinds"]
    lines = [f"Workers' device kinds (seen in the last 7 days; submit --gpu names one): {kinds(data['worker_kinds'])}",
             f"Runs' device kinds: {runs}",
             "The grade counts: " + ("; ".join(f"{m}: {printable(k, 100)}" for m, k in sorted(grading.items()))
                                     or "no kind chosen"),
             f"A GPU kind no worker reported: {data['unknown_gpus']}"]
    if data.get("slurm_kinds") is not None:                      # serve --slurm: its mapping
        mapped = "; ".join(f"{printable(m['kind'], 100)} ({printable(m['request'], 200)})"
                           for m in data["slurm_kinds"])
        lines.insert(1, "Slurm's device kinds (serve --slurm-kind; submit --gpu names one; another only where a "
                        f"worker of it asks for work): {mapped or 'none'}")
    client.out.write("".join(line + "\n" for line in lines))
    return 0

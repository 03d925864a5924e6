"""``teams import`` against a real ``serve`` (SQLite and PostgreSQL): a class of 100,000 in
seconds, every token in its file; an import whose answer was lost (or whose request never
arrived) completed by running it again, no team without its token file; a roster with one bad
row (NUL, named twice, alike an existing team, reserved) creating nothing and naming the line;
the service's own refusals (NUL, tokens not of its shape or not random, an id twice or taken);
``teams add a b c`` printing each token once."""
import hashlib
import json
import random
import socket
import threading
import time

import pytest

from servicekit import Service, started_postgres

pytestmark = pytest.mark.service

BIG = 100_000
BIG_SECONDS = 60                      # the bound asserted; docs/service.md has the times measured


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def svc(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"import-{request.param}")
    pg = started_postgres(root / "pg") if request.param == "postgresql" else None
    service = Service(root / "svc", workers=0, env={"ECE408_DB": pg.url} if pg else {}).start()
    service.db = pg.url if pg else service.sqlite_path
    yield service
    service.close()
    if pg is not None:
        pg.stop()


def query(svc, sql, params=()):
    if svc.db.startswith("postgresql://"):
        import psycopg
        with psycopg.connect(svc.db) as conn:
            return conn.execute(sql.replace("?", "%s"), params).fetchall()
    import sqlite3
    with sqlite3.connect(svc.db) as conn:
        return conn.execute(sql, params).fetchall()


def teams_like(svc, prefix):
    """{team: {(token id, secret digest)} of its active tokens} of the teams named ``prefix``..."""
    found = {name: set() for (name,) in query(svc, "SELECT name FROM service_teams WHERE name LIKE ?", (prefix + "%",))}
    for name, token_id, digest in query(svc, "SELECT name, id, secret_hash FROM service_tokens WHERE kind = 'team' "
                                             "AND revoked_at IS NULL AND name LIKE ?", (prefix + "%",)):
        found.setdefault(name, set()).add((token_id, digest))
    return found


def file_tokens(folder):
    """{team (the file's name less .token): token} of a token folder's files, each checked mode 600."""
    out = {}
    for path in folder.iterdir():
        assert oct(path.stat().st_mode & 0o777) == "0o600", path
        assert path.name.endswith(".token") and not path.name.startswith("."), path
        out[path.name[:-len(".token")]] = path.read_text().strip()
    return out


def digest_of(token):
    _, token_id, secret = token.split("_", 2)
    return token_id, hashlib.sha256(secret.encode()).hexdigest()


def assert_every_team_has_its_file(svc, prefix, folder, count):
    teams, files = teams_like(svc, prefix), file_tokens(folder)
    assert len(teams) == count and sorted(teams) == sorted(files), (len(teams), len(files))
    wrong = [name for name, token in files.items() if digest_of(token) not in teams[name]]
    assert not wrong, wrong[:5]


def roster(path, names, header="netid,team\n"):
    path.write_text(header + "".join(f"id{i},{name}\n" for i, name in enumerate(names)))
    return path


# ---------------------------------------------------------------------------- a class of 100,000

@pytest.mark.timeout(600)
def test_a_class_of_100000_is_imported_in_seconds_every_token_in_its_file(svc, tmp_path):
    names = [f"big-{i:06d}" for i in range(BIG)]
    started = time.monotonic()
    out = svc.cli("teams", "import", roster(tmp_path / "class.csv", names), "--token-dir", tmp_path / "tokens")
    took = time.monotonic() - started
    print(f"\n{svc.db.split(':')[0]}: {BIG:,} teams imported in {took:.1f} s\n{out.stderr}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert took < BIG_SECONDS, out.stderr
    assert f"* {BIG:,} teams created in " in out.stderr and len(out.stdout.splitlines()) == BIG
    files = file_tokens(tmp_path / "tokens")
    assert len(files) == BIG
    assert_every_team_has_its_file(svc, "big-", tmp_path / "tokens", BIG)
    with svc.http() as http:
        for name in random.Random(408).sample(names, 20):
            who = http.get("/api/whoami", headers={"Authorization": f"Bearer {files[name]}"})
            assert who.status_code == 200 and who.json() == {"kind": "team", "name": name}, who.text
    started = time.monotonic()
    again = svc.cli("teams", "import", tmp_path / "class.csv", "--token-dir", tmp_path / "tokens")
    print(f"{svc.db.split(':')[0]}: the same import again in {time.monotonic() - started:.1f} s\n{again.stderr}")
    assert again.returncode == 0 and again.stdout == "", again.stderr
    assert f"* {BIG:,} teams of the roster already there" in again.stderr
    assert len(teams_like(svc, "big-")) == BIG


# ---------------------------------------------------------------------------- the answer lost

class DroppingProxy:
    """A TCP proxy to ``port`` that passes everything but the one request whose request line is
    ``line``: ``mode`` "answer": the request goes through and the connection is closed as its
    answer begins (the service did the work, the client never hears of it); "request": the
    connection is closed as the request line comes (the service never sees it)."""

    def __init__(self, port, line, mode):
        self.target, self.line, self.mode = port, line, mode
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.dropped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        up = socket.create_connection(("127.0.0.1", self.target))
        dropping = threading.Event()

        def close():
            for s in (conn, up):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

        def upward():
            seen = b""
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                if not dropping.is_set():
                    seen = seen[-len(self.line):] + data
                    if self.line in seen:
                        dropping.set()
                        if self.mode == "request":
                            self.dropped.set()
                            close()
                            return
                try:
                    up.sendall(data)
                except OSError:
                    return
        threading.Thread(target=upward, daemon=True).start()
        while True:
            try:
                data = up.recv(65536)
            except OSError:
                return
            if not data:
                close()
                return
            if dropping.is_set():
                self.dropped.set()
                close()
                return
            try:
                conn.sendall(data)
            except OSError:
                return

    def close(self):
        self.server.close()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("lost", ["answer", "request"])
def test_an_import_whose_answer_is_lost_is_completed_by_running_it_again(svc, tmp_path, lost):
    prefix, count = f"lost-{lost}-", 3000
    path = roster(tmp_path / "class.csv", [f"{prefix}{i:05d}" for i in range(count)])
    folder = tmp_path / "tokens"
    proxy = DroppingProxy(svc.port, b"POST /api/admin/teams/import HTTP/1.1", lost)
    try:
        first = svc.cli("teams", "import", path, "--token-dir", folder, env={"ECE408_SERVER": proxy.url,
                                                                            "ECE408_TOKEN": svc.instructor_token})
    finally:
        proxy.close()
    assert proxy.dropped.is_set()
    assert first.returncode == 2, first.stderr
    last = first.stderr.splitlines()[-1]
    assert last.startswith("error: no answer to the import (") and "run the same command again" in last, last
    files = file_tokens(folder)
    assert len(files) == count                                   # every token kept before anything was sent
    made = teams_like(svc, prefix)
    assert len(made) == (count if lost == "answer" else 0)
    assert all(digest_of(files[name]) in tokens for name, tokens in made.items())
    again = svc.cli("teams", "import", path, "--token-dir", folder)
    assert again.returncode == 0, again.stderr
    if lost == "answer":
        assert f"* {count:,} teams of the roster already there" in again.stderr and again.stdout == ""
    else:
        assert f"0 token files written to {folder} (mode 600), {count:,} kept from an earlier try" in again.stderr
        assert f"* {count:,} teams created in " in again.stderr and len(again.stdout.splitlines()) == count
    assert_every_team_has_its_file(svc, prefix, folder, count)


def test_a_team_of_the_roster_made_by_teams_add_is_named_its_token_not_shown_again(svc, tmp_path):
    svc.add_teams("made-by-add")
    path = roster(tmp_path / "class.csv", ["made-by-add", "made-by-import"])
    out = svc.cli("teams", "import", path)                        # the default folder: class-tokens
    assert out.returncode == 0, out.stderr
    assert ("* 1 team of the roster exists already without a token file in " f"{tmp_path / 'class-tokens'}: "
            "made-by-add; a token is shown once (teams rotate NAME gives one a new token)") in out.stderr
    assert out.stdout == f"made-by-import: token written to {tmp_path / 'class-tokens' / 'made-by-import.token'}\n"
    assert sorted(file_tokens(tmp_path / "class-tokens")) == ["made-by-import"]
    again = svc.cli("teams", "import", path)
    assert again.returncode == 0 and "* 1 team of the roster already there" in again.stderr, again.stderr
    assert "made-by-add; a token is shown once" in again.stderr and "Nothing to create" in again.stderr


# ---------------------------------------------------------------------------- one bad row

BAD_ROWS = {
    "named twice": (["bad-a", "bad-b", "bad-a"], 400, "line 4: team bad-a is named twice (line 2 too); nothing was "
                                                      "imported"),
    "alike an existing team": (["bad-c", "Existing-Team"], 409, "line 3: team Existing-Team would print or export like "
                                                                "the existing team existing-team"),
    "alike another row": (["bad-d", "bad-E", "bad-e"], 409, "lines 3 and 4: teams bad-E and bad-e would print or "
                                                            "export alike"),
    "reserved": (["bad-f", "instructor"], 400, "line 3: instructor is (or looks like) the name of the service's own token file"),
    "too long": (["bad-g", "x" * 101], 400, "line 3: the team name xxxxx"),
}


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_a_roster_with_one_bad_row_creates_nothing_and_names_its_line(svc, tmp_path, case):
    names, _, says = BAD_ROWS[case]
    if case == "alike an existing team" and not teams_like(svc, "existing-team"):
        svc.add_teams("existing-team")
    before = teams_like(svc, "")
    out = svc.cli("teams", "import", roster(tmp_path / "class.csv", names), "--token-dir", tmp_path / "tokens")
    assert out.returncode == 2 and out.stdout == "", out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 2 and lines[1].startswith(f"error: the roster {tmp_path / 'class.csv'}, line"), out.stderr
    assert says in lines[1] and lines[1].endswith("nothing was imported") or "nothing was imported (" in lines[1], \
        out.stderr
    assert teams_like(svc, "") == before
    assert not (tmp_path / "tokens").exists() or not list((tmp_path / "tokens").iterdir())


def test_a_roster_with_a_nul_or_a_short_row_is_refused_before_anything_is_sent(svc, tmp_path):
    (tmp_path / "nul.csv").write_bytes(b"team\nnul-a\nnul\x00b\n")
    (tmp_path / "short.csv").write_text("netid,team\nab1,short-a\ncd2\n")
    before = teams_like(svc, "")
    for name, says in (("nul.csv", "line 3: the team name holds the control character U+0000"),
                       ("short.csv", "line 3: no team column (the team is column 2; this row has 1)")):
        out = svc.cli("teams", "import", tmp_path / name)
        assert out.returncode == 2 and says in out.stderr and out.stderr.count("\n") == 1, out.stderr
    assert teams_like(svc, "") == before


def token(token_id=None, secret=None):
    import secrets
    return f"ece408_{token_id or secrets.token_hex(8)}_{secret or secrets.token_urlsafe(32)}"


def test_the_service_refuses_nul_and_tokens_it_did_not_expect_naming_the_line(svc):
    taken = svc.add_teams("holds-an-id")["holds-an-id"].split("_")[1]
    twice = "0123456789abcdef"
    cases = [
        ("/api/admin/teams/import/check", {"names": ["api-a", "api\x00b"], "lines": [2, 3]}, 400,
         "line 3: the team name holds NUL (U+0000); nothing was imported"),
        ("/api/admin/teams/import", {"names": ["api-a", "api\x00b"], "lines": [2, 3], "tokens": [token(), token()]},
         400, "line 3: the team name holds NUL"),
        ("/api/admin/teams", {"names": ["api-a", "api\x00b"]}, 400, "a team name holds NUL (U+0000); nothing was added"),
        ("/api/admin/teams/import", {"names": ["api-a", "api-b"], "lines": [2, 5], "tokens": [token(), "ece408_x"]},
         400, "line 5: its token is not one of this service"),
        ("/api/admin/teams/import", {"names": ["api-a"], "lines": [7], "tokens": [token(secret="a" * 43)]}, 400,
         "line 7: its token is not a random one"),
        ("/api/admin/teams/import", {"names": ["api-a"], "lines": [7], "tokens": [token(token_id="0" * 16)]}, 400,
         "line 7: its token is not a random one"),
        ("/api/admin/teams/import", {"names": ["api-a", "api-b"], "lines": [2, 3],
                                     "tokens": [token(token_id=twice), token(token_id=twice)]}, 400,
         "lines 2 and 3 have the same token id"),
        ("/api/admin/teams/import", {"names": ["api-a", "api-b"], "lines": [2, 3], "tokens": [token(), token(taken)]},
         409, f"line 3: its token's id {taken} is another token's"),
        ("/api/admin/teams/import", {"names": ["api-a"], "lines": [2, 3], "tokens": [token()]}, 400, "lines is a list"),
        ("/api/admin/teams/import/check", {"names": ["x"] * 100_001, "lines": [2] * 100_001}, 413,
         "one import takes at most 100,000"),
        ("/api/admin/teams", {"names": [f"many-{i}" for i in range(1001)]}, 413, "teams add takes at most 1,000"),
    ]
    for path, body, status, says in cases:
        answer = svc.admin("POST", path, content=json.dumps(body), headers={"Content-Type": "application/json"})
        assert answer.status_code == status and says in answer.json()["error"], (path, says, answer.text)
    assert not teams_like(svc, "api-") and not teams_like(svc, "many-")


# ---------------------------------------------------------------------------- teams add as it was

def test_teams_add_prints_each_token_once(svc):
    out = svc.cli("teams", "add", "add-a", "add-b", "add-c")
    assert out.returncode == 0, out.stderr
    lines = [line.split("\t") for line in out.stdout.splitlines()]
    assert [name for name, _ in lines] == ["add-a", "add-b", "add-c"]
    with svc.http() as http:
        for name, text in lines:
            assert http.get("/api/whoami", headers={"Authorization": f"Bearer {text}"}).json()["name"] == name
    again = svc.cli("teams", "add", "add-a")
    assert again.returncode == 2 and "already exist: add-a; nothing was added" in again.stderr and not again.stdout

"""Records, names and the ranking, against real SQLite files and a real PostgreSQL server: team
names escape injectively and are never cut (no two teams share a row), a spooled record is
never replaced (the first one written under an id stays), the skip rule counts every grading
option and never an ``error`` record, the ranking compares only runs of one option set, and
CSV cells never start a formula."""
import csv
import io
import json
import os
import unicodedata

import pytest
from hypothesis import given, settings, strategies as st

from services import Postgres, Unavailable
from teams import cli

from ece408_op.grading import store as store_module
from ece408_op.base.names import UNPRINTABLE, printable, shown, team_name
from ece408_op.grading.options import options_key, run_options
from ece408_op.grading.ranking import FORMULA_STARTS
from ece408_op.grading.store import Record, SpooledError, move_spool, open_store, spool, spooled_files


@pytest.fixture(scope="module")
def postgres(tmp_path_factory):
    try:
        server = Postgres(tmp_path_factory.mktemp("pg")).start()
    except Unavailable as exc:
        pytest.skip(str(exc))
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.service)])    # a PostgreSQL server
def db_url(request, tmp_path):
    """An empty database of each kind."""
    if request.param == "sqlite":
        return str(tmp_path / "r.db")
    return request.getfixturevalue("postgres").create_database(f"r{os.getpid()}{abs(hash(tmp_path)) % 10**8}")


def unescape(text):
    """The inverse of ``printable`` (no limit): the string a stored name was made from."""
    out, i = [], 0
    while i < len(text):
        if text[i] != "\\":
            out.append(text[i])
            i += 1
            continue
        kind = text[i + 1]
        if kind == "\\":
            out.append("\\")
            i += 2
        elif kind == "x":
            code = int(text[i + 2:i + 4], 16)
            out.append(chr(code) if code < 0x80 else chr(0xDC00 + code))
            i += 4
        elif kind in "uU":
            width = 4 if kind == "u" else 8
            out.append(chr(int(text[i + 2:i + 2 + width], 16)))
            i += 2 + width
        else:
            raise AssertionError(f"unknown escape in {text!r}")
    return "".join(out)


def record(team, op_time=0.2, status="ok", at="2026-01-01T00:00:00", options=None, content_hash="h", rid=None,
           reason=None):
    models = [{"model": "ece408-high", "op_times": [op_time / 2], "op_time": op_time / 2, "correctness": 0.91,
               "expected": 0.91, "correct": True},
              {"model": "ece408-low", "op_times": [op_time / 2], "op_time": op_time / 2, "correctness": 0.68,
               "expected": 0.68, "correct": True}]
    ok = status == "ok"
    return Record(rid or f"{team}-{op_time}-{at}-{status}", at, team, "m2", 100, status, 0 if ok else 1,
                  op_time if ok else None, ok, models if ok else [], device="cpu", transcript="...",
                  content_hash=content_hash, options=options, options_key=options_key(options) if options else None,
                  reason=reason)


# ---------------------------------------------------------------------------- names

BYTE_OF_SURROGATE = st.characters(min_codepoint=0xDC80, max_codepoint=0xDCFF)


@pytest.mark.slow
@settings(max_examples=2000, deadline=None)
@given(st.lists(st.one_of(st.characters(), BYTE_OF_SURROGATE, st.sampled_from("\\x0\x07\x85\u2028")), max_size=30))
def test_team_names_escape_injectively_and_print_no_control_character(chars):
    raw = "".join(chars)
    name = team_name(raw)
    assert unescape(name) == raw                                  # a left inverse: no two names alike
    assert not any(unicodedata.category(c) in UNPRINTABLE for c in name)
    assert shown(name) == name                                    # shown as stored


def test_names_that_printed_alike_are_now_different():
    pairs = [("team\\x07", "team\x07"),                           # a literal backslash, a real BEL
             (os.fsdecode(b"t\x85"), "t\x85"),                    # the byte 0x85, the character U+0085
             ("a" * 199 + "1", "a" * 199 + "2")]                  # the first 199 characters shared
    for one, two in pairs:
        assert team_name(one) != team_name(two), (one, two)
        assert team_name(os.fsencode(one)) == team_name(one)       # a folder name as bytes: the same
    assert team_name("team\\x07") == "team\\\\x07" and team_name("team\x07") == "team\\x07"
    assert team_name("a" * 300) == "a" * 300                      # never cut
    assert printable("a" * 300) == "a" * 199 + "…"                # other one-line texts may be


def test_long_and_escaped_names_stay_separate_teams_in_the_ranking(db_url):
    names = [team_name(n) for n in ("team\\x07", "team\x07", "a" * 199 + "1", "a" * 199 + "2")]
    with open_store(db_url) as store:
        for i, name in enumerate(names):
            for j, at in enumerate(("2026-01-01T00:00:01", "2026-01-01T00:00:02")):
                store.add(record(name, 0.1 + i / 100 + j / 1000, at=at))
    data = json.loads(cli("ranking", "--db", db_url, "--milestone", "m2", "--size", 100, "--json").stdout)
    assert [(r["team"], r["runs"]) for r in data["ranking"]] == [(n, 2) for n in names]
    table = cli("ranking", "--db", db_url, "--milestone", "m2", "--size", 100).stdout.splitlines()
    assert [line.split()[1] for line in table[2:]] == names       # in full, each once


# ---------------------------------------------------------------------------- the spool

def test_the_first_record_spooled_under_an_id_is_kept(tmp_path):
    measured = record("t", 0.3, rid="r1")
    later = record("t", status="error", rid="r1", reason="the grading itself failed")
    first = spool(measured, "db", tmp_path / "spool")
    assert spool(later, "db", tmp_path / "spool") == first
    assert list(spooled_files(tmp_path / "spool")) == ["r1"] and os.listdir(tmp_path / "spool") == ["r1.json"]
    assert json.loads(first.read_text())["record"]["status"] == "ok"
    # moved into a spool that already holds the id: the one there stays, the source is emptied
    spool(record("t", status="killed", rid="r2"), "db", tmp_path / "user")
    spool(record("t", 0.4, rid="r2"), "db", tmp_path / "spool")
    assert move_spool(tmp_path / "spool", tmp_path / "user") == []
    assert sorted(spooled_files(tmp_path / "user")) == ["r1", "r2"] and spooled_files(tmp_path / "spool") == {}
    user = spooled_files(tmp_path / "user")
    assert json.loads(user["r1"].read_text())["record"]["status"] == "ok"
    assert json.loads(user["r2"].read_text())["record"]["status"] == "killed"


def test_a_spooled_record_never_replaces_a_stored_one(db_url, tmp_path, monkeypatch):
    monkeypatch.setenv("ECE408_SPOOL", str(tmp_path / "spool"))
    with open_store(db_url) as store:
        store.add(record("t", 0.3, rid="r1"))
    spool(record("t", status="killed", rid="r1"), db_url)          # a late fall-back of the same id
    spool(record("u", 0.4, rid="r2"), db_url)
    with open_store(db_url) as store:                              # opening delivers the spool
        assert spooled_files() == {}
        kept = {r.id: r for r in store.records()}
    assert kept["r1"].status == "ok" and kept["r1"].op_time == 0.3 and kept["r2"].op_time == 0.4


def test_spooled_error_carries_the_record_and_where_it_waits(tmp_path, monkeypatch):
    monkeypatch.setenv("ECE408_SPOOL", str(tmp_path / "spool"))
    measured = record("t", 0.3, rid="r9")

    def fails():
        raise store_module.StoreError("the disk is full")
    with pytest.raises(SpooledError) as caught:
        store_module.stored_or_spooled(measured, "db", fails, seconds=0)
    assert caught.value.record is measured and caught.value.path == tmp_path / "spool" / "r9.json"
    assert f"it waits in {tmp_path / 'spool' / 'r9.json'}" in str(caught.value)


# ---------------------------------------------------------------------------- the skip rule

def test_graded_needs_the_same_options_and_a_status_that_counts(db_url):
    two = run_options("m2", 100, None, None, "bubblewrap")
    three = run_options("m2", 100, None, "ab" * 32, "bubblewrap")
    more = run_options("m2", 100, 2, None, "bubblewrap")
    host = run_options("m2", 100, None, None, "host")
    assert len({options_key(o) for o in (two, three, more, host)}) == 4
    with open_store(db_url) as store:
        store.add(record("ok-team", options=two, content_hash="c1"))
        store.add(record("old-team", options=None, content_hash="c1"))          # before migration 3
        store.add(record("error-team", status="error", options=two, content_hash="c1"))
        store.add(record("killed-team", status="killed", options=two, content_hash="c1"))
        assert store.graded("ok-team", "m2", 100, "c1", options_key(two))
        assert not store.graded("ok-team", "m2", 100, "c2", options_key(two))      # other content
        for other in (three, more, host):                                           # other options
            assert not store.graded("ok-team", "m2", 100, "c1", options_key(other))
        assert not store.graded("old-team", "m2", 100, "c1", options_key(two))
        assert not store.graded("error-team", "m2", 100, "c1", options_key(two))  # an infrastructure fault
        assert store.graded("killed-team", "m2", 100, "c1", options_key(two))
        assert not store.graded("killed-team", "m2", 100, "c1", options_key(two), retry_stopped=True)


# ---------------------------------------------------------------------------- the ranking

def test_the_ranking_compares_one_option_set_and_names_the_others(db_url):
    two = run_options("m2", 100, None, None, "bubblewrap")
    three = run_options("m2", 100, None, "ab" * 32, "bubblewrap")
    with open_store(db_url) as store:
        store.add(record("old", 0.05, at="2026-01-01T00:00:00"))                 # options not recorded
        store.add(record("fast-on-two", 0.10, at="2026-01-01T00:00:01", options=two))
        store.add(record("slow-on-two", 0.30, at="2026-01-01T00:00:02", options=two))
        store.add(record("three", 0.20, at="2026-01-01T00:00:03", options=three))  # the newest set
    key2, key3 = options_key(two), options_key(three)

    def ranking(*extra, form=()):
        out = cli("ranking", "--db", db_url, "--milestone", "m2", "--size", 100, *form, *extra)
        assert out.returncode == 0, out.stderr
        return out
    table = ranking().stdout.splitlines()
    assert table[0] == "Ranking: m2, 100 images on cpu (1 team(s); 0 run(s) not valid)"
    assert table[1] == (f"Options: m2, 100 images, 3 models (hidden abababab), 1 fresh run(s) a layer, "
                        f"engine bubblewrap, ranked by the median of 3-1000 repeats (to 1% relative error or 10 s) "
                        f"(--options {key3})")
    assert table[2].startswith("Other option sets of m2 on 100 images, not compared with these: ")
    assert f"{key2} (m2, 100 images, 2 models" in table[2] and "unrecorded (options not recorded; 1 run(s))" in table[2]
    assert table[2].endswith("choose one with: ranking --options KEY")
    assert [line.split()[1] for line in table[4:]] == ["three"]
    chosen = ranking("--options", key2[:6]).stdout.splitlines()                 # a prefix is enough
    assert [line.split()[1] for line in chosen[4:]] == ["fast-on-two", "slow-on-two"]
    assert [line.split()[1] for line in ranking("--options", "unrecorded").stdout.splitlines()[3:]] == ["old"]
    data = json.loads(ranking("--options", key2, form=["--json"]).stdout)
    assert data["options_key"] == key2 and data["options"] == two
    assert sorted(o["key"] for o in data["other_options"]) == sorted([key3, "unrecorded"])
    assert [r["team"] for r in data["ranking"]] == ["fast-on-two", "slow-on-two"]
    out = ranking(form=["--csv"])
    assert [row[1] for row in csv.reader(io.StringIO(out.stdout))][1:] == ["three"]
    assert out.stderr.startswith("note: Other option sets of m2 on 100 images")
    bad = cli("ranking", "--db", db_url, "--milestone", "m2", "--size", 100, "--options", "zz")
    assert bad.returncode == 1 and bad.stdout == "" and len(bad.stderr.strip().splitlines()) == 1
    assert bad.stderr.startswith("error: --options zz is not an option set of these runs; the sets: ")


def test_csv_cells_never_start_a_formula(tmp_path):
    db = tmp_path / "r.db"
    names = ["=HYPERLINK(\"http://evil\",\"click\")", "+1+1", "-2", "@SUM(A1)", "\tx", "plain"]
    with open_store(str(db)) as store:
        for i, name in enumerate(names):
            r = record(team_name(name), 0.1 + i / 100)
            r.device = "=cmd|' /C calc'!A0" if i == 0 else "cpu"
            store.add(r)
    out = cli("ranking", "--db", db, "--milestone", "m2", "--size", 100, "--csv")
    assert out.returncode == 0, out.stderr
    rows = list(csv.reader(io.StringIO(out.stdout)))
    cells = [c for row in rows for c in row]
    assert not any(c.startswith(FORMULA_STARTS) for c in cells), cells
    teams = [row[1] for row in rows[1:]]
    assert teams == ["'=HYPERLINK(\"http://evil\",\"click\")", "'+1+1", "'-2", "'@SUM(A1)", "\\x09x", "plain"]
    assert rows[1][6] == "'=cmd|' /C calc'!A0"


# ---------------------------------------------------------------------------- the migrations' lock

def hold_migration_lock(url):
    """Another connection holding what a migration takes: PostgreSQL's advisory lock of the
    records' migrations, SQLite's write lock on the file. Closing it releases the lock."""
    if url.startswith("postgresql://"):
        import psycopg
        conn = psycopg.connect(url, autocommit=True)
        conn.execute("SELECT pg_advisory_lock(%s)", (store_module.LOCK_KEY,))
        return conn
    import sqlite3
    conn = sqlite3.connect(url, isolation_level=None, check_same_thread=False)
    conn.execute("BEGIN IMMEDIATE")
    return conn


def test_a_connection_to_a_current_schema_does_not_wait_for_the_migrations_lock(db_url):
    """Every connection took the migrations' lock to find nothing to do: a service's pool opening a
    dozen at once under a burst opened them one at a time (the soak, 2026-12-02). A schema already
    current is read without it; one behind still migrates under it (test_schema_is_migrated_on_first_use)."""
    import threading
    open_store(db_url).close()                                          # migrated
    holder = hold_migration_lock(db_url)
    opened = []
    try:
        opener = threading.Thread(target=lambda: opened.append(open_store(db_url)), daemon=True)
        opener.start()
        opener.join(10)
        assert opened, "opening a store waited for the migrations' lock that another connection holds"
        assert opened[0].schema_version() == len(store_module.MIGRATIONS)
    finally:
        holder.close()
        opener.join(30)
        for store in opened:
            store.close()

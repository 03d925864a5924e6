"""Team names that store, print or export alike, against a real service (SQLite and PostgreSQL):
a name and its escaped form (a backslash, a control character, a bidi mark, an undecodable byte),
NFC against NFD, NFKC's compatibility forms, invisible characters, spaces around it, CSV-formula
names. Wanted: the second refused at ``teams add`` and ``teams import`` in one line naming the
team that exists (nothing added), and where two such teams exist after all, no output crediting
one with the other's run or marking the other's row as the viewer's own."""
import csv
import io
import json
import re
import time

import httpx
import pytest

from hostilekit import (Worker, csrf_of, login, module_service,
                        submit_ranked)
from pagekit import wait_until

from ece408_op.base.names import printable

pytestmark = pytest.mark.service

# "{}": where each test puts a tag of its own (the pair's relation kept). The first of each pair is one a class
# may hold: a ligature or a superscript is refused by the form of names (PRECIS: tests/service/test_team_identity.py),
# a full-width name stored in usual letters
PAIRS = {
    "a backslash and its escape": ("a\\b{}", "a\\\\b{}"),
    "a control character and its escape": ("ctl\x01x{}", "ctl\\x01x{}"),
    "an ANSI colour and its escape": ("red\x1b[0m{}", "red\\x1b[0m{}"),
    "a bidi override and its escape": ("bidi\u202eab{}", "bidi\\u202eab{}"),
    "a line separator and its escape": ("line\u2028x{}", "line\\u2028x{}"),
    "an undecodable byte and its escape": ("byte\udcffx{}", "byte\\xffx{}"),
    "NFC and NFD": ("caf\u00e9{}", "cafe\u0301{}"),
    "NFKC: a ligature": ("fish{}", "\ufb01sh{}"),
    "NFKC: full width": ("ABteam{}", "\uff21\uff22team{}"),
    "NFKC: superscript": ("team2{}", "team\u00b2{}"),
    "a zero-width space": ("zw{}", "z\u200bw{}"),
    "a zero-width joiner at the end": ("zwj{}", "zwj{}\u200d"),
    "a byte order mark in front": ("bom{}", "\ufeffbom{}"),
    "a soft hyphen": ("soft{}", "so\u00adft{}"),
    "spaces around": ("spaced{}", "  spaced{} "),
    "a no-break space": ("nbsp{}", "nbsp{}\u00a0"),
    "a formula and its quoted export": ("=SUM(A1){}", "'=SUM(A1){}"),
    "a plus formula": ("+team{}", "'+team{}"),
}

svc = module_service("names")


def unique(name, tag):
    """``name`` (a template of PAIRS) with this test's tag in its place."""
    return name.replace("{}", f"-{tag}")


def add(svc, names):
    """POST /api/admin/teams, its JSON written here: names may hold lone surrogates (undecodable
    bytes of a folder name), which JSON carries as escapes."""
    return svc.admin("POST", "/api/admin/teams", content=json.dumps({"names": names}).encode(),
                     headers={"Content-Type": "application/json"})


def team_names(svc):
    return {t["name"] for t in svc.admin("GET", "/api/admin/teams").json()["teams"]}


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_a_name_that_prints_like_an_existing_team_is_refused(svc, pair):
    """``teams add`` of the second name of each pair, the first existing: refused (4xx) in one
    line naming the existing team; the class unchanged. Both in one request: neither added."""
    tag = f"{time.monotonic_ns() % 10**9}"
    first, second = (unique(n, tag) for n in PAIRS[pair])
    assert add(svc, [first]).status_code == 200
    before = team_names(svc)
    answer = add(svc, [second])
    assert 400 <= answer.status_code < 500, (pair, answer.status_code, answer.text)
    message = answer.json()["error"]
    assert "\n" not in message
    assert printable(first) in message, message
    assert team_names(svc) == before
    tag2 = f"{tag}b"
    both = add(svc, [unique(n, tag2) for n in PAIRS[pair]])
    assert 400 <= both.status_code < 500, (pair, both.text)
    assert team_names(svc) == before


def test_teams_import_and_teams_add_refuse_look_alikes_in_one_line(svc, tmp_path):
    """The instructor's commands: a roster holding a name and its look-alike is refused (exit 2,
    one line, nothing added); ``teams add`` of a look-alike of an existing team likewise."""
    tag = f"{time.monotonic_ns() % 10**9}"
    roster = tmp_path / "roster.csv"
    pairs = ("NFC and NFD", "a backslash and its escape")
    rows = [["team", "members"]] + [[unique(n, tag), "someone"] for pair in pairs for n in PAIRS[pair]]
    with open(roster, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    before = team_names(svc)
    out = svc.cli("teams", "import", roster)
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]   # beside its progress lines
    assert out.returncode == 2 and len(errors) == 1 and out.stderr.splitlines()[-1] == errors[0], \
        (out.returncode, out.stdout, out.stderr)
    assert team_names(svc) == before
    first, second = (unique(n, tag + "c") for n in PAIRS["a zero-width space"])
    assert svc.cli("teams", "add", first).returncode == 0
    out = svc.cli("teams", "add", second)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, (out.returncode, out.stderr)
    assert printable(first) in out.stderr


ESCAPED = ["a backslash and its escape", "a control character and its escape", "an undecodable byte and its escape"]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("pair", ESCAPED)
def test_a_team_never_gets_the_run_or_the_row_of_its_look_alike(svc, pair):
    """Where both teams of a pair exist (a service that lets the second in), each ranked with a
    run of its own: the instructor's CSV puts each team's own record on its row; with names
    anonymised each team's ranking marks one row as its own, its own, and shows no other name."""
    tag = f"{time.monotonic_ns() % 10**9}"
    raw = [unique(n, tag) for n in PAIRS[pair]]
    added = [add(svc, [n]) for n in raw]
    if added[1].status_code != 200:
        assert 400 <= added[1].status_code < 500                      # refused at the door: nothing to confuse
        return
    teams = [a.json()["teams"][0] for a in added]
    worker = Worker(svc)
    jobs = {}
    try:
        for i, t in enumerate(teams):
            job = submit_ranked(svc, t["token"])
            assert job.status_code == 201, job.text
            claim = worker.claim(wait=5)
            assert claim["job"]["id"] == job.json()["id"]
            assert worker.finish(claim, op_time=0.01 * (i + 1)).status_code == 200
            jobs[t["name"]] = claim["job"]["record_id"]
    finally:
        worker.close()
    time.sleep(1.5)
    instructor = login(svc.url, svc.instructor_token)
    export = svc.admin("GET", "/api/ranking", params={"milestone": "m2", "size": 100, "format": "json"}).json()
    assert {r["team"] for r in export["ranking"]} >= set(jobs)
    answer = httpx.get(svc.url + "/admin/ranking.csv", params={"milestone": "m2", "size": 100},
                       cookies={"ece408_session": instructor}, timeout=30)
    rows = [r for r in csv.DictReader(io.StringIO(answer.text)) if r["record_id"] in jobs.values()]
    credited = {r["record_id"]: r["team"] for r in rows}
    problems = [f"{printable(name)}'s run is credited to {credited.get(record_id)!r} in the instructor's CSV"
                for name, record_id in jobs.items() if credited.get(record_id) != name]
    csrf = csrf_of(svc.url, instructor, "/admin")
    set_names = httpx.post(svc.url + "/admin/names", data={"names": "anonymised", "csrf": csrf},
                           cookies={"ece408_session": instructor}, timeout=30)
    assert set_names.status_code == 303, set_names.text[:300]
    try:
        time.sleep(2.5)                                             # the setting is read again every 2 s
        for t in teams:
            mine = [r for r in httpx.get(svc.url + "/api/ranking", params={"milestone": "m2", "size": 100,
                                                                         "format": "json"},
                                         headers={"Authorization": f"Bearer {t['token']}"},
                                         timeout=30).json()["ranking"]
                    if not re.fullmatch(r"Team [0-9a-f]{6,}", r["team"])]
            if [r["record_id"] for r in mine] != [jobs[t["name"]]]:
                problems.append(f"{printable(t['name'])}'s anonymised /api/ranking names these rows: "
                                f"{[(r['team'], r['record_id'] == jobs[t['name']]) for r in mine]}")
            cookie = login(svc.url, t["token"])
            page = wait_until(lambda: httpx.get(svc.url + "/", params={"milestone": "m2", "size": 100},
                                                cookies={"ece408_session": cookie}, timeout=30).text, 10)
            own = re.findall(r'<tr class="own">.*?</tr>', page, re.S)
            if len(own) != 1:
                problems.append(f"{printable(t['name'])}'s ranking page marks {len(own)} rows as its own")
    finally:
        csrf = csrf_of(svc.url, instructor, "/admin")
        httpx.post(svc.url + "/admin/names", data={"names": "shown", "csrf": csrf},
                   cookies={"ece408_session": instructor}, timeout=30)
    assert not problems, "\n".join(problems)

"""One identity per team: names that would store, print or export alike are refused when a team
is added (a real ``serve``, SQLite and PostgreSQL), in one line naming the team they collide
with, nothing added; and a team whose name holds escapes is credited with its own runs only (the
instructor's CSV, the anonymised ranking's "your team"), in the pages' application."""
import re

import pytest

from servicekit import service_on
from test_pages import Class, table_rows, text_of

ALIKE = [
    ("a\\b", "a\\\\b"),                          # a name and its escaped form
    ("bell\x07", "bell\\x07"),                   # a control character and its escape typed out
    ("caf\u00e9", "cafe\u0301"),                 # composed and decomposed
    ("Team7", "team7"),                          # case: one token file on macOS and Windows
    ("ｔｅａｍ８", "team8"),                      # full-width letters (the first stored as team8: PRECIS)
    ("=sum", "'=sum"),                           # a formula and its CSV-quoted export
    ("two  spaces", "two spaces"),               # runs of white space
    ("fish", "ﬁsh"),                             # a ligature (refused by its form as well: PRECIS)
]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def svc(request, tmp_path_factory):
    with service_on(request.param, tmp_path_factory.mktemp(f"names-{request.param}"), workers=0) as service:
        yield service


def names(svc):
    answer = svc.admin("GET", "/api/admin/teams")
    assert answer.status_code == 200
    return [t["name"] for t in answer.json()["teams"]]


@pytest.mark.service
@pytest.mark.parametrize("first, second", ALIKE, ids=range(len(ALIKE)))
def test_names_that_print_or_export_alike_are_refused_one_line(svc, first, second):
    before = names(svc)
    added = svc.admin("POST", "/api/admin/teams", json={"names": [first]})
    assert added.status_code == 200, added.text
    stored = added.json()["teams"][0]["name"]
    answer = svc.admin("POST", "/api/admin/teams", json={"names": [second, "innocent-" + str(len(before))]})
    assert answer.status_code == 409, answer.text
    error = answer.json()["error"]
    assert stored in error and "\n" not in error
    assert names(svc) == sorted(before + [stored])                    # nothing else was added


@pytest.mark.service
def test_alike_names_in_one_call_add_nothing(svc):
    before = names(svc)
    answer = svc.admin("POST", "/api/admin/teams", json={"names": ["Zed", "fresh-one", "zed"]})
    assert answer.status_code == 409 and "Zed" in answer.json()["error"]
    assert names(svc) == before


def test_a_team_with_an_escape_in_its_name_is_credited_with_its_own_runs_only(tmp_path):
    """``a\\b`` and ``ab`` run once each: the instructor's CSV credits each with its own Op Time,
    and with names anonymised each team's "your team" row is its own."""
    klass = Class(tmp_path, names=("a\\b", "ab"))
    with klass.client:
        slash, plain = klass.tokens["a\\\\b"], klass.tokens["ab"]
        klass.runs.run(slash, [[0.03], [0.02]])
        klass.runs.run(plain, [[0.01], [0.01]])
        instructor = klass.browser(klass.instructor)
        csv_text = instructor.get("/admin/ranking.csv", params={"milestone": "m2", "size": 100}).text
        rows = {line.split(",")[1]: line for line in csv_text.splitlines()[1:]}
        assert "0.050000" in rows["a\\\\b"] and "0.020000" in rows["ab"], csv_text
        out = instructor.post("/admin/names", data={"csrf": instructor.csrf("/admin"), "names": "anonymised"})
        assert out.status_code == 303
        for token, own in ((slash, "a\\\\b"), (plain, "ab")):
            page = klass.browser(token).get("/").text
            mine = [text_of(row) for row in re.findall(r'<tr class="[^"]*\bown\b[^"]*"[^>]*>(.*?)</tr>', page, re.S)]
            assert len(mine) == 1 and own in mine[0], (own, mine, table_rows(page))

"""A team's name is an identity (service/identity.py), against a real ``serve`` on SQLite and
PostgreSQL, through ``POST /api/admin/teams`` and the instructor's ``teams add`` and ``teams
import``: the look-alikes a red team found let in (letters of other scripts and symbols drawn
like Latin letters, a Braille blank, combining accents, strokes and an enclosing circle, an em
quad) refused beside the teams they imitate, each in one line naming the team or the rule, the
class unchanged; honest names of one script (Chinese, Greek, Hindi, Japanese, French) let in as
given; names of mixed scripts and marks on no letter refused on their own; the ASCII rule
(``serve --names ascii``); a class whose keys an older rule made; the check's cost per name."""
import csv
import time

import pytest

from servicekit import service_on

from ece408_op.service import tokens as tokens_module
from ece408_op.service.db import Database
from ece408_op.service.refused import Refused

# (the team in the class, the name then refused, what the one line must say besides the team's name)
FOUND = {
    "an APL alpha for a": ("alpha", "\u237alpha", "UTS #39"),
    "a Latin tone six for B": ("bravo", "\u0184ravo", "UTS #39"),
    "a small capital C": ("victor", "vi\u1d04tor", "UTS #39"),
    "a Cherokee letter for d": ("delta", "\u13e7elta", "UTS #39"),
    "a Braille blank inside": ("bravo", "bra\u2800vo", "U+2800 (BRAILLE PATTERN BLANK)"),
    "a combining acute accent": ("alpha", "al\u0301pha", "combining marks"),
    "a combining long stroke overlay": ("victor", "vic\u0336tor", "combining marks"),
    "a combining long solidus overlay": ("delta", "del\u0338ta", "combining marks"),
    "a combining enclosing circle": ("bravo", "brav\u20ddo", "combining marks"),
    "an em quad inside": ("victor", "vic\u2001tor", "U+2001 (EM QUAD)"),
    "a Greek omicron in bravo": ("bravo", "brav\u03bf", "UTS #39"),
    "a Cyrillic a in alpha": ("alpha", "\u0430lpha", "UTS #39"),
    "full-width letters": ("alpha", "\uff41\uff4c\uff50\uff48\uff41", "already exist"),  # the same username
}
ALONE = {                          # refused with no team beside them: the form of names
    "a symbol drawn as a letter": ("\u237alpha", "U+237A (APL FUNCTIONAL SYMBOL ALPHA)"),
    "a Braille blank": ("br\u2800avo", "U+2800"),
    "an em quad": ("vic\u2001tor", "U+2001 (EM QUAD)"),
    "an enclosing circle": ("brav\u20ddo", "U+20DD"),
    "Cyrillic letters in a Latin name": ("p\u0430yp\u0430l", "mixes scripts"),
    "a Cherokee letter in a Latin name": ("\u13e7elta", "mixes scripts"),
    "a Greek letter in a Latin name": ("brav\u03bf", "mixes scripts"),
    "an accent on no letter": ("team-\u0301one", "on no letter"),
    "three accents on one letter": ("te\u0301\u0300\u0302am", "more than 2 combining marks"),
    "a look-alike of the instructor's file": ("\u0131nstructor", "service's own token file"),
}
HONEST = ["\u56e2\u961f", "\u03bf\u03bc\u03ac\u03b4\u03b1", "\u0926\u0932", "\u0926\u093f\u0932",
          "\u65e5\u672c\u8a9e\u30c1\u30fc\u30e0", "\u00c9quipe Rouge", "Team-7", "H\u00e0 N\u1ed9i"]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def svc(request, tmp_path_factory):
    with service_on(request.param, tmp_path_factory.mktemp(f"identity-{request.param}"), workers=0) as service:
        yield service


def names(svc):
    answer = svc.admin("GET", "/api/admin/teams")
    assert answer.status_code == 200
    return sorted(t["name"] for t in answer.json()["teams"])


def add(svc, *new):
    return svc.admin("POST", "/api/admin/teams", json={"names": list(new)})


def tagged(name, tag):
    return f"{name}-{tag}"


@pytest.mark.service
@pytest.mark.parametrize("case", sorted(FOUND))
def test_a_look_alike_found_is_refused_beside_its_team_in_one_line(svc, case):
    target, alike, says = FOUND[case]
    tag = time.monotonic_ns() % 10**9
    target, alike = tagged(target, tag), tagged(alike, tag)
    assert add(svc, target).status_code == 200
    before = names(svc)
    answer = add(svc, alike)
    assert 400 <= answer.status_code < 500, (case, answer.status_code, answer.text)
    error = answer.json()["error"]
    assert "\n" not in error and says in error, error
    if answer.status_code == 409:
        assert target in error, error                             # the team it looks like, named
    assert names(svc) == before
    both = add(svc, tagged("fresh", tag), alike)                       # nothing of a refused call is added
    assert 400 <= both.status_code < 500 and names(svc) == before


@pytest.mark.service
@pytest.mark.parametrize("case", sorted(ALONE))
def test_a_name_breaking_the_form_of_names_is_refused_alone(svc, case):
    name, says = ALONE[case]
    before = names(svc)
    answer = add(svc, name)
    assert answer.status_code == 400, (case, answer.text)
    error = answer.json()["error"]
    assert "\n" not in error and says in error, error
    assert names(svc) == before


@pytest.mark.service
def test_honest_names_of_one_script_are_let_in_as_given(svc):
    tag = time.monotonic_ns() % 10**9
    given = [tagged(n, tag) for n in HONEST]
    answer = add(svc, *given)
    assert answer.status_code == 200, answer.text
    assert [t["name"] for t in answer.json()["teams"]] == given
    assert set(given) <= set(names(svc))


@pytest.mark.service
def test_teams_add_and_teams_import_name_the_collision_in_one_line(svc, tmp_path):
    tag = time.monotonic_ns() % 10**9
    assert svc.cli("teams", "add", f"victor-{tag}").returncode == 0
    before = names(svc)
    out = svc.cli("teams", "add", f"vi\u1d04tor-{tag}")
    assert out.returncode == 2 and out.stderr.count("\n") == 1, (out.returncode, out.stdout, out.stderr)
    assert f"the team 'victor-{tag}'" in out.stderr and "UTS #39" in out.stderr, out.stderr
    out = svc.cli("teams", "add", f"br\u2800avo-{tag}")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "U+2800 (BRAILLE PATTERN BLANK)" in out.stderr
    roster = tmp_path / "roster.csv"
    with open(roster, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["team", "members"], [f"honest-{tag}", "a"], [f"\u13e7elta-{tag}", "b"],
                                 [f"delta-{tag}", "c"]])
    out = svc.cli("teams", "import", roster)
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]   # beside its progress lines
    assert out.returncode == 2 and len(errors) == 1 and out.stderr.splitlines()[-1] == errors[0], \
        (out.returncode, out.stdout, out.stderr)
    assert f"delta-{tag}" in errors[0], out.stderr
    assert names(svc) == before
    with open(roster, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["team", "members"], [f"honest-{tag}", "a"], [f"\u0430lpha-{tag}", "b"]])
    out = svc.cli("teams", "import", roster)
    assert out.returncode == 2 and "mixes scripts" in out.stderr and names(svc) == before, out.stderr


@pytest.mark.service
def test_a_roster_imported_again_skips_its_teams(svc, tmp_path):
    """A name PRECIS stores otherwise (full width) and names of other scripts: the second import of
    the same roster adds nothing and refuses nothing."""
    tag = time.monotonic_ns() % 10**9
    roster = tmp_path / "again.csv"
    with open(roster, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["team"], [f"\uff34eam-{tag}"], [f"\u56e2\u961f-{tag}"]])
    first = svc.cli("teams", "import", roster)
    assert first.returncode == 0, first.stderr
    assert f"Team-{tag}" in names(svc)
    again = svc.cli("teams", "import", roster)
    assert again.returncode == 0, again.stderr


def test_the_ascii_rule_lets_in_only_ascii_names(running_service, tmp_path):
    service = running_service(tmp_path / "svc", workers=0, args=["--names", "ascii"])
    assert add(service, "team-1.ok_B").status_code == 200
    answer = add(service, "\u00c9quipe")
    assert answer.status_code == 400 and "serve --names ascii" in answer.json()["error"], answer.text
    assert "U+00C9" in answer.json()["error"]
    assert add(service, "team 2").status_code == 400                # a space: not in the rule
    assert add(service, "TEAM-1.OK_b").status_code == 409           # case: as under the Unicode rule
    roster = tmp_path / "roster.csv"                                 # an import holds to the same rule
    roster.write_text("team\nplain-2\n\u00c9quipe\n", encoding="utf-8")
    out = service.cli("teams", "import", roster, "--token-dir", tmp_path / "tokens")
    assert out.returncode == 2 and "line 3" in out.stderr and "serve --names ascii" in out.stderr, out.stderr
    assert names(service) == ["team-1.ok_B"]


def test_a_class_keyed_by_an_older_rule_is_keyed_again(tmp_path):
    """Teams added when keys were the older folding (no skeleton): the first add under this rule
    makes every key again, so a look-alike of an old team is refused; two old teams that now look
    alike both stay (the later one keyless), and neither can be imitated."""
    db = Database(str(tmp_path / "t.db"))
    tokens = tokens_module.Tokens(db)
    tokens.add_teams(["victor", "alpha"])
    with db.transaction() as tx:                                       # as an older service left them
        tx.execute("UPDATE service_teams SET name_key = name || '-old'")
        tx.execute("INSERT INTO service_teams (name, created_at, name_key) VALUES (?, ?, ?)",
                   ("vi\u1d04tor", time.time() + 1, "vi\u1d04tor-old"))
        tx.execute("DELETE FROM service_settings WHERE key = 'name_keys'")
    with pytest.raises(Refused) as refused:
        tokens.add_teams(["\u237alpha"])
    assert "the team 'alpha'" in str(refused.value)
    with pytest.raises(Refused) as refused:
        tokens.add_teams(["v\u0131ctor"])
    assert "'victor'" in str(refused.value)
    assert {t["name"] for t in tokens.list_teams()} == {"victor", "alpha", "vi\u1d04tor"}
    with db.transaction(write=False) as tx:
        keys = dict(tx.all("SELECT name, name_key FROM service_teams"))
    assert keys["vi\u1d04tor"] is None and keys["victor"] == tokens_module.name_key("victor")


@pytest.mark.slow                                   # measured 5.7 s (loaded machine)
@pytest.mark.timeout(300)
def test_the_check_is_a_lookup_per_name_not_a_comparison_with_every_team(tmp_path):
    """100,000 names checked (form and key) in seconds, and a class of 20,000 teams added in one
    call: a name is compared with the others by its key (the database's index), never pairwise."""
    given = [f"team-{i}" if i % 2 else f"\u00e9quipe-{i}" for i in range(100_000)]
    start = time.perf_counter()
    for name in given:
        tokens_module.check_team_name(name)
        tokens_module.name_key(name)
    per_name = (time.perf_counter() - start) / len(given)
    assert per_name < 300e-6, f"{per_name * 1e6:.0f} us a name"
    tokens = tokens_module.Tokens(Database(str(tmp_path / "t.db")))
    start = time.perf_counter()
    tokens.add_teams(given[:20_000])
    took = time.perf_counter() - start
    with pytest.raises(Refused) as refused:
        tokens.add_teams(["t\u0435am-19999"])                         # a Cyrillic ie: looks like team-19999
    assert "team-19999" in str(refused.value)
    assert took < 120, f"{took:.1f} s for 20,000 teams"


def test_the_confusables_are_read_once_and_map_each_source_to_its_prototype():
    from ece408_op.service import identity
    table = identity.prototypes()
    assert identity.prototypes() is table                              # read once, at first use
    assert table[ord("\u237a")] == "a" and table[ord("\u0430")] == "a" and table[ord("m")] == "rn"
    assert ord("a") not in table and ord("l") not in table            # prototypes map to themselves
    assert identity.skeleton("\u0184ravo") == identity.skeleton("bravo")
    assert identity.skeleton("PaypaI") == identity.skeleton("paypal") and identity.skeleton("rn") == identity.skeleton("m")

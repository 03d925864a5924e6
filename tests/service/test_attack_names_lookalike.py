"""Team names that look alike and token files that collide, against a real service (SQLite and
PostgreSQL). The class's names are the teams' choice, typed into a roster: a hostile team picks a
name that a reader of the ranking cannot tell from another team's (letters of another script
that look Latin, characters every font draws as nothing), or one whose token file is another
team's. Wanted: ``teams add`` refuses the look-alike (4xx, the class unchanged), and ``teams add
--token-dir`` never writes one team's token over another's file (nor over the instructor's)."""
import hashlib
import json
import time

import pytest

from hostilekit import module_service

pytestmark = pytest.mark.service

svc = module_service("names2")


def add(svc, names):
    return svc.admin("POST", "/api/admin/teams", content=json.dumps({"names": names}).encode(),
                     headers={"Content-Type": "application/json"})


def team_names(svc):
    return {t["name"] for t in svc.admin("GET", "/api/admin/teams").json()["teams"]}


def tag():
    return f"{time.monotonic_ns() % 10**9}"


LOOK_ALIKE = {                      # "{}": where each test puts a tag of its own (digits: every script alike)
    "Cyrillic р, а, у for Latin p, a, y": ("paypal{}", "\u0440\u0430\u0443\u0440\u0430l{}"),
    "a Cyrillic а in a Latin name": ("alpha{}", "\u0430lpha{}"),
    "a Greek ο for a Latin o": ("robot{}", "r\u03bfbot{}"),
    "Cyrillic і and ѕ for Latin i and s": ("kiss{}", "k\u0456\u0455s{}"),
    "a Cherokee Ꭺ for a Latin A": ("Alpha{}", "\u13aalpha{}"),
    "an APL ⍺ for a Latin a": ("alpha{}", "\u237alpha{}"),          # the red team's, third round: UTS #39
    "a Latin tone six Ƅ for a b": ("bravo{}", "\u0184ravo{}"),
    "a small capital ᴄ for a c": ("victor{}", "vi\u1d04tor{}"),
    "a Cherokee Ꮷ for a d": ("delta{}", "\u13e7elta{}"),
}

INVISIBLE = {                       # default-ignorable characters that are not format controls
    "a variation selector (U+FE0F)": "\ufe0f",
    "a variation selector (U+FE00)": "\ufe00",
    "the combining grapheme joiner (U+034F)": "\u034f",
    "the Hangul filler (U+3164)": "\u3164",
    "the half-width Hangul filler (U+FFA0)": "\uffa0",
    "the Hangul choseong filler (U+115F)": "\u115f",
    "a Mongolian free variation selector (U+180B)": "\u180b",
    "a Khmer inherent vowel (U+17B4)": "\u17b4",
    "a supplementary variation selector (U+E0100)": "\U000e0100",
    "a Braille blank (U+2800)": "\u2800",                          # the red team's, third round
    "a combining acute accent (U+0301)": "\u0301",
    "a combining long stroke overlay (U+0336)": "\u0336",
    "a combining long solidus overlay (U+0338)": "\u0338",
    "a combining enclosing circle (U+20DD)": "\u20dd",
    "an em quad (U+2001)": "\u2001",
}


def refused_second(svc, first, second):
    """(the answer to adding ``second`` with ``first`` in the class, the class before, after)."""
    assert add(svc, [first]).status_code == 200
    before = team_names(svc)
    answer = add(svc, [second])
    return answer, before, team_names(svc)


@pytest.mark.parametrize("case", sorted(LOOK_ALIKE))
def test_a_name_in_letters_of_another_script_that_look_latin_is_refused(svc, case):
    """The second name of each pair, the first in the class: it prints as the first in every
    font a ranking is read in. Refused (4xx), the class unchanged; NFKC, case folding and the
    removal of invisible characters leave such a pair apart, so it is let in today."""
    t = tag()
    first, second = (n.replace("{}", f"-{t}") for n in LOOK_ALIKE[case])
    answer, before, after = refused_second(svc, first, second)
    assert 400 <= answer.status_code < 500, (case, answer.status_code, answer.text[:200])
    assert after == before


@pytest.mark.parametrize("case", sorted(INVISIBLE))
def test_a_name_with_an_invisible_mark_added_is_refused(svc, case):
    """An existing team's name with one character added that Unicode marks default-ignorable
    (drawn as nothing): the two print alike. Refused (4xx), the class unchanged. The rule leaves
    out only the characters ``printable`` escapes (format controls: Cf), and these are marks
    (Mn) or letters (Lo)."""
    t = tag()
    first = f"gamma-{t}"
    answer, before, after = refused_second(svc, first, f"gamma{INVISIBLE[case]}-{t}")
    assert 400 <= answer.status_code < 500, (case, answer.status_code, answer.text[:200])
    assert after == before


def whose(svc, token):
    """The team a token opens, or None."""
    with svc.http(token) as http:
        answer = http.get("/api/whoami")
    return answer.json().get("name") if answer.status_code == 200 else None


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_teams_never_share_a_token_file(svc, tmp_path):
    """``teams add --token-dir DIR`` names a token file by the team's name, or, for a name that is
    not plain ASCII, ``team-`` and 12 hex digits of its SHA-256. A team that names itself those
    twelve digits of a rival's name gets the rival's file: in one command, the second token is
    written over the first (shown once: lost), and the file the instructor hands the rival opens
    the hostile team. Wanted: each team's token in a file of its own (or the command refused,
    nothing added)."""
    t = tag()
    victim = f"\u00c9quipe-{t}"
    squatter = "team-" + hashlib.sha256(victim.encode()).hexdigest()[:12]
    tokens = tmp_path / "tokens"
    out = svc.cli("teams", "add", victim, squatter, "--token-dir", tokens, token=svc.instructor_token)
    if out.returncode != 0:
        assert victim not in team_names(svc) and squatter not in team_names(svc), out.stderr
        return
    opened = {whose(svc, f.read_text().strip()) for f in tokens.iterdir()}
    assert opened == {victim, squatter}, (f"the token files {sorted(f.name for f in tokens.iterdir())} open "
                                          f"{opened}; {out.stdout}")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_team_s_token_file_is_never_written_over_the_instructor_s(running_service, tmp_path):
    """The instructor runs ``teams add`` on the server's machine with ``--token-dir`` its state
    folder (where ``serve`` keeps instructor.token) and a team named ``instructor``: the team's
    token must not replace the instructor's file, which ``serve`` registers as the instructor's
    token at its next start: the team's token would then be the instructor's. Wanted: the
    instructor's file unchanged (or the command refused), and after a restart no team token
    reaching the instructor's routes."""
    svc = running_service.on(tmp_path / "svc", "sqlite", None)
    try:
        state = svc.root / "state" / "ece408_op" / "service"
        original = svc.instructor_token
        out = svc.cli("teams", "add", "instructor", "--token-dir", state, token=original)
        written = (state / "instructor.token").read_text().strip()
        svc.stop()
        svc.start()
        with svc.http(written) as http:
            reached = http.get("/api/admin/teams").status_code
    finally:
        svc.close()
    assert written == original, (f"teams add (exit {out.returncode}) wrote team instructor's token over the "
                                 f"instructor's file; after a restart that token reaches /api/admin/teams: "
                                 f"{reached}")

"""A team's name is its identity: checked against stated standards when a team is added (``teams
add``, ``teams import``, ``POST /api/admin/teams``), so that no team can appear in the ranking as
another.

Its form: the PRECIS username profile UsernameCasePreserved (RFC 8265, through ``precis-i18n``),
applied to the name as records escape it (control and format characters, undecodable bytes written
as visible escapes: ``names.printable``), to each of its parts between spaces (RFC 8265 section
3.1: a username is userparts separated by spaces). It refuses what a username may not hold
(symbols such as U+2800 BRAILLE PATTERN BLANK, spaces other than U+0020 such as U+2001 EM QUAD,
enclosing marks such as U+20DD, characters drawn as nothing, compatibility characters such as
ligatures and superscripts, right-to-left text breaking the bidi rule) and maps full-width letters
to their usual form and the name to NFC: the name is stored so, its case as given. Beside
it, this module's own rules (``form_refusal``):

- one script (UTS #39 "highly restrictive"): the name's letters, digits and marks from one script,
  Common and Inherited aside (digits 0-9, punctuation, combining accents), or Latin with Han and
  Japanese kana, Han and Bopomofo, or Han and Hangul;
- a combining mark of no script of its own (Inherited: accents, overlays such as U+0336 and U+0338)
  only on a letter, at most two on one letter.

Its look: ``name_key``, the form in which two names that look alike coincide. The names' own
folding (NFKC, case, escapes, invisible characters, white space, the CSV export) and then Unicode's
confusable skeleton (UTS #39 section 4: NFD, default-ignorable code points removed, each code point
mapped to its prototype in confusables.txt, NFD again; with case folding between, until nothing
changes), and last the Inherited combining marks removed (two names differing only in accents or
overlays coincide). The prototypes are read once, at first use, from the copy of confusables.txt
that ``confusable-homoglyphs`` ships (its JSON lists each pair both ways; a source code point is
the one with a single entry, listed before its prototype). ``collision`` says in one line which
rule two names meet under.

Or the ASCII rule (``serve --names ascii``): a name only of ``A-Z a-z 0-9 . _ -``.
"""
import bisect
import functools
import json
import re
import unicodedata

from ..base.extras import install_hint
from .refused import Refused

PROFILE = "UsernameCasePreserved"
RULES = ("unicode", "ascii")
ASCII_NAME = re.compile(r"[A-Za-z0-9._-]+")
PLAIN = re.compile(r"[!-~]+( +[!-~]+)*")
ESCAPE = re.compile(r"\\(x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})")      # names.printable's escapes
# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt): drawn as nothing
IGNORABLE = re.compile("[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
                       "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3"
                       "\U0001d173-\U0001d17a\U000e0000-\U000e0fff]")
# UTS #39 5.2 "highly restrictive": the sets of scripts a name may mix (besides one script alone)
MIXES = (frozenset({"LATIN", "HAN", "HIRAGANA", "KATAKANA"}), frozenset({"LATIN", "HAN", "BOPOMOFO"}),
         frozenset({"LATIN", "HAN", "HANGUL"}))
NO_SCRIPT = ("COMMON", "INHERITED", "Unknown")
MARKS_ON_A_LETTER = 2
WHY = {"controls": "a control character", "spaces": "a space other than U+0020",
       "symbols": "a symbol", "punctuation": "punctuation outside ASCII",
       "has_compat": "a compatibility character (a ligature, a superscript, a font or width variant)",
       "precis_ignorable_properties": "a character drawn as nothing", "unassigned": "an unassigned code point",
       "other_letter_digits": "a character that is neither a letter nor a digit",
       "old_hangul_jamo": "an old Hangul jamo", "bidi_rule": "right-to-left text against the bidi rule"}


def _need(module):
    try:
        return __import__(module)
    except ImportError:
        raise Refused(503, f"team names are checked with precis-i18n and confusable-homoglyphs, which this "
                           f"server lacks: {install_hint('service')}") from None


@functools.lru_cache(maxsize=None)
def _profile():
    return _need("precis_i18n").get_profile(PROFILE)


@functools.lru_cache(maxsize=None)
def prototypes():
    """{code point: its prototype} from confusables.txt (``str.translate``'s table), read once; and
    for a capital whose case folding is one code point that is no source, that code point mapped to
    the same prototype (``Ƅ`` is drawn like ``b``: so is its ``ƅ`` here, and ``I`` like ``l``: so is
    ``i``, where names are compared with their case folded)."""
    import importlib.resources
    _need("confusable_homoglyphs")
    pairs = json.loads(importlib.resources.files("confusable_homoglyphs").joinpath("confusables.json")
                       .read_text(encoding="utf-8"))
    order = {text: i for i, text in enumerate(pairs)}
    table = {}
    for source, entries in pairs.items():
        if len(source) != 1 or len(entries) != 1:
            continue                            # a prototype (several sources, or a string) or noise
        target = entries[0]["c"]
        if len(target) > 1 or len(pairs.get(target, ())) > 1 or order[source] < order.get(target, -1):
            table[ord(source)] = target
    for source, target in list(table.items()):
        folded_source = chr(source).casefold()
        if unicodedata.category(chr(source)) in ("Lu", "Lt") and len(folded_source) == 1 and \
                ord(folded_source) not in table and folded_source != target.casefold():
            table[ord(folded_source)] = target
    return table


@functools.lru_cache(maxsize=None)
def _scripts():
    """(range starts, [(end, script)]) of Scripts.txt, as confusable-homoglyphs ships it."""
    _need("confusable_homoglyphs")
    from confusable_homoglyphs.categories import categories_data as data
    ranges = sorted(data["code_points_ranges"])
    return [r[0] for r in ranges], [(r[1], data["iso_15924_aliases"][r[2]]) for r in ranges]


def script(ch):
    starts, rest = _scripts()
    i = bisect.bisect_right(starts, ord(ch)) - 1
    return rest[i][1] if i >= 0 and ord(ch) <= rest[i][0] else "Unknown"


@functools.lru_cache(maxsize=None)
def _inherited_marks():
    """``str.translate``'s table removing the combining marks of the Inherited script."""
    starts, rest = _scripts()
    table = {}
    for start, (end, name) in zip(starts, rest):
        if name == "INHERITED":
            table.update({c: None for c in range(start, end + 1) if unicodedata.category(chr(c)).startswith("M")})
    return table


def describe(ch):
    """``U+2800 (BRAILLE PATTERN BLANK)``."""
    return f"U+{ord(ch):04X} ({unicodedata.name(ch, unicodedata.category(ch))})"


# ------------------------------------------------------------------ the form
def enforce(name, rule="unicode"):
    """``name`` (stripped and escaped as records escape names: control and format characters,
    undecodable bytes as visible escapes, ``names.printable``) as stored, or Refused (400) in one
    line saying which rule it breaks."""
    if rule == "ascii":
        if not ASCII_NAME.fullmatch(name):
            bad = next((ch for ch in name if not ASCII_NAME.fullmatch(ch)), name[:1])
            raise Refused(400, f"the team name '{name}' holds {describe(bad)}: this class's names "
                               "are ASCII letters, digits, '.', '_' and '-' only (serve --names ascii)")
        return name
    if PLAIN.fullmatch(name):
        return name                             # printable ASCII and single spaces: PRECIS keeps it, one script
    profile = _profile()
    parts = re.split(r"( +)", name)
    for i in range(0, len(parts), 2):
        try:
            parts[i] = profile.enforce(parts[i])
        except UnicodeError as e:
            raise Refused(400, _precis_line(name, parts[i], e)) from None
    enforced = "".join(parts)
    why = form_refusal(enforced)
    if why:
        raise Refused(400, f"the team name '{name}' {why}: choose another name")
    return enforced


def _precis_line(name, part, error):
    reason = str(getattr(error, "reason", "")).rpartition("/")[2]
    obj = getattr(error, "object", part)
    bad = obj[error.start] if isinstance(obj, str) and 0 <= getattr(error, "start", -1) < len(obj) else ""
    given = next((ch for ch in part if bad and bad in unicodedata.normalize("NFC", ch)), bad)
    if given and unicodedata.category(given) == "Zs":
        reason = "spaces"
    what = WHY.get(reason, reason.replace("_", " ") or "a character")
    held = f"holds {describe(given)}, {what}" if given else f"breaks a rule ({what})"
    return (f"the team name '{name}' {held}, which a username may not hold (PRECIS, RFC 8265): "
            "choose another name")


def form_refusal(name):
    """Why an enforced name breaks the script or the combining-mark rule, or None."""
    scripts = {script(ch) for ch in name} - set(NO_SCRIPT)
    if len(scripts) > 1 and not any(scripts <= mix for mix in MIXES):
        letters = ", ".join(f"{s.title()} {next(describe(c) for c in name if script(c) == s)}" for s in sorted(scripts))
        return f"mixes scripts ({letters}): a name's letters come from one script"
    marks = _inherited_marks()
    run, base = 0, ""
    for ch in unicodedata.normalize("NFD", name):
        if ord(ch) in marks:
            run += 1
            if not base or not unicodedata.category(base).startswith("L"):
                return f"holds the combining mark {describe(ch)} on no letter"
            if run > MARKS_ON_A_LETTER:
                return f"holds more than {MARKS_ON_A_LETTER} combining marks on one letter ({describe(ch)})"
        elif not unicodedata.category(ch).startswith("M"):
            run, base = 0, ch
    return None


# ------------------------------------------------------------------ the look
def folded(stored, csv_cell):
    """The names' own folding: how ``stored`` exports (``csv_cell``), in NFKC, runs of backslashes
    as one, without escapes and default-ignorable characters, runs of white space as one, case folded."""
    text = re.sub(r"\\+", r"\\", unicodedata.normalize("NFKC", csv_cell(stored)))
    text = IGNORABLE.sub("", ESCAPE.sub("", text))
    return " ".join(text.split()).casefold()


def skeleton(text):
    """UTS #39's skeleton of ``text`` (case folded), with case folding after, until nothing changes
    (a prototype's case folding may be another's source: Cherokee, small capitals)."""
    table = prototypes()
    for _ in range(8):
        new = unicodedata.normalize("NFD", IGNORABLE.sub("", unicodedata.normalize("NFD", text)).translate(table))
        new = new.casefold()
        if new == text:
            break
        text = new
    return text


def bare(text):
    """``text`` (a skeleton) without its Inherited combining marks."""
    return unicodedata.normalize("NFD", text).translate(_inherited_marks())


def name_key(stored, csv_cell):
    return bare(skeleton(folded(stored, csv_cell)))


def collision(new, other, csv_cell, in_call=False):
    """The clause refusing ``new`` beside the team ``other`` (both escaped as stored), by the rule
    they meet under: the names' own folding, Unicode's confusables, or combining marks only."""
    a, b = folded(new, csv_cell), folded(other, csv_cell)
    if a == b:
        return (f"teams {other} and {new} would print or export alike" if in_call else
                f"team {new} would print or export like the existing team {other}")
    if skeleton(a) == skeleton(b):
        return f"'{new}' looks like the team '{other}' (Unicode's confusables, UTS #39)"
    return f"'{new}' differs from the team '{other}' only in combining marks (accents, overlays)"


@functools.lru_cache(maxsize=None)
def keys_version():
    """What the keys depend on (the rules here, the confusables' data): kept with the keys, so that
    a change makes them again."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        data = version("confusable-homoglyphs")
    except PackageNotFoundError:
        data = "unknown"
    return f"uts39-skeleton-bare/1 confusable-homoglyphs {data} unicode {unicodedata.unidata_version}"

"""What a ranked run was measured with, as one value: the record keeps it, ``grade`` skips a team
only when a record of the same content has the same options, and the ranking compares only runs
whose options are equal (a total over two models is not comparable with one over three).

    {"milestone": "final", "size": 10000, "models": ["ece408-high", "ece408-low", "hidden"],
     "hidden": "<sha256 of the hidden model's files>" | None, "repeats": 5, "engine": "bubblewrap",
     "timing": {"statistic": "mean", "rse": 0.01, "min": 3, "max": 100, "cap_s": 10.0}}

``repeats`` are the fresh runs a layer behind the course's printed Op Time; ``timing`` the rule
that times the model after it (``team/repeats.py``), whose mean ranks. Records from before the
rule have no ``timing``: another option set.

``options_key`` is a short stable digest of it (canonical JSON).
"""
import hashlib
import json

from ..course import MILESTONES, RANKED_MODELS
from ..team import repeats as timing_rule

# Timed runs on fresh inputs per layer in a ranked run (course.py): never 0.
RANKED_REPEATS = {name: m.ranked_repeats for name, m in MILESTONES.items() if m.ranked_repeats}


def ranked_repeats(milestone, repeats=None):
    """The fresh timed runs per layer of a ranked ``milestone`` (``repeats`` where given)."""
    return RANKED_REPEATS[milestone] if repeats is None else int(repeats)


def hidden_digest(symbol_path, params_path):
    """SHA-256 over a hidden model's two files (name, size, bytes), streamed."""
    digest = hashlib.sha256()
    for path in (symbol_path, params_path):
        with open(path, "rb") as f:
            data = f.read()
        digest.update(f"{path.name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def run_options(milestone, size, repeats=None, hidden=None, engine=None):
    """The options of a ranked run (see the module docstring); ``hidden``: the hidden model's digest."""
    models = list(RANKED_MODELS) + (["hidden"] if hidden else [])
    return {"milestone": milestone, "size": int(size), "models": models, "hidden": hidden,
            "repeats": ranked_repeats(milestone, repeats), "engine": engine, "timing": timing_rule.rule()}


def options_key(options):
    """A short digest of ``options`` (a dict), equal exactly when the options are."""
    text = json.dumps(options or {}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def describe_options(options):
    """One line for people: ``final, 10000 images, 3 models (hidden ab12cd34), 5 fresh run(s) a layer,
    engine bubblewrap, ranked by the median of 3-1000 repeats (to 1% relative error or 10 s)``."""
    if not options:
        return "options not recorded"
    models = options.get("models") or []
    hidden = f" (hidden {str(options['hidden'])[:8]})" if options.get("hidden") else ""
    return (f"{options.get('milestone')}, {options.get('size')} images, {len(models)} models{hidden}, "
            f"{options.get('repeats')} fresh run(s) a layer, engine {options.get('engine') or '?'}{_timing(options)}")


def _timing(options):
    rule = options.get("timing")
    if not isinstance(rule, dict):
        return ""
    try:
        return (f", ranked by the {rule.get('statistic')} of {int(rule['min'])}-{int(rule['max'])} repeats "
                f"(to {100 * float(rule['rse']):g}% relative error or {float(rule['cap_s']):g} s)")
    except (KeyError, TypeError, ValueError):
        return ", timing rule unreadable"

"""The tiers by measured duration (docs/tests.md): every run records each test's time, and a run
given ``--fast-tier-check`` (``make test-fast``) fails when the fast tier (the tests marked neither
``slow`` nor ``service``) has drifted: a test whose call took longer than the fast tier allows, or a
tier whose tests took longer in all than its budget. A plugin of its own (registered by
tests/conftest.py), so that its own test runs it on a synthetic test file (tests/suite/test_tiers.py).

The limits are ini options (pytest.ini): ``fast_tier_test_s`` a test's call, ``fast_tier_total_s``
the tier's tests together (set-up, call and tear-down, summed over the workers under ``-n``), both
as on an idle 2-core machine, and ``fast_tier_margin`` and ``fast_tier_total_margin``, the factors
a loaded machine is allowed on each.

The durations go to ``.pytest_cache/d/ece408/durations-<tier>.json`` (``<tier>`` the ``-m``
expression, ``all`` without one), or the run's temporary folder where there is no cache."""
import json
import re
import time
from pathlib import Path

import pytest

SLOW_TIER = ("slow", "service")


def add_options(parser):
    parser.addoption("--fast-tier-check", action="store_true", default=False,
                     help="fail the run when a test outside the slow tier (no slow or service marker) takes "
                          "longer than fast_tier_test_s x fast_tier_margin, or the fast tier's tests together "
                          "longer than fast_tier_total_s x fast_tier_total_margin (make test-fast)")
    parser.addini("fast_tier_test_s", "seconds a fast-tier test's call may take on an idle machine", default="5")
    parser.addini("fast_tier_total_s", "seconds the fast tier's tests may take together on an idle machine",
                  default="120")
    parser.addini("fast_tier_margin", "the factor a loaded machine is allowed on a fast-tier test's limit",
                  default="3")
    parser.addini("fast_tier_total_margin", "the factor a loaded machine is allowed on the fast tier's budget",
                  default="1.5")


def register(config):
    config.pluginmanager.register(Tiers(config), "ece408-tiers")


class Tiers:
    def __init__(self, config):
        self.config = config
        self.tests = {}                     # nodeid -> {"call": s, "total": s, "fast": bool}
        self.started = time.monotonic()

    def pytest_runtest_logreport(self, report):
        # Under xdist the controller gets every worker's reports, keywords included (the marker names).
        entry = self.tests.setdefault(report.nodeid, {"call": 0.0, "total": 0.0,
                                                      "fast": not any(m in report.keywords for m in SLOW_TIER)})
        entry["total"] += report.duration
        if report.when == "call":
            entry["call"] = report.duration

    def limits(self):
        """(a fast-tier test's call, the tier's tests together: each in seconds, its margin included)"""
        ini = self.config.getini
        return (float(ini("fast_tier_test_s")) * float(ini("fast_tier_margin")),
                float(ini("fast_tier_total_s")) * float(ini("fast_tier_total_margin")))

    def offenders(self):
        """(the fast-tier tests past their limit as (nodeid, call seconds), the tier's total, and the
        two limits with the margin)."""
        test_limit, total_limit = self.limits()
        fast = {nodeid: t for nodeid, t in self.tests.items() if t["fast"]}
        slow = sorted(((nodeid, t["call"]) for nodeid, t in fast.items() if t["call"] > test_limit),
                      key=lambda pair: -pair[1])
        return slow, sum(t["total"] for t in fast.values()), test_limit, total_limit

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session):
        if hasattr(self.config, "workerinput"):          # a worker: the controller records and checks
            return
        self.write(session)
        if not self.config.getoption("fast_tier_check") or not self.tests:
            return
        slow, total, test_limit, total_limit = self.offenders()
        if not slow and total <= total_limit:
            return
        lines = ["the fast tier has drifted (docs/tests.md, 'Two tiers'): mark these tests slow "
                 "(or service, if they start one), or make them fast again"]
        lines += [f"  {seconds:7.1f} s  {nodeid}   (a fast-tier test's call may take {test_limit:g} s)"
                  for nodeid, seconds in slow]
        if total > total_limit:
            longest = sorted(((t["total"], n) for n, t in self.tests.items() if t["fast"]), reverse=True)[:10]
            lines.append(f"  the fast tier's tests took {total:.1f} s together, past its budget of "
                         f"{total_limit:g} s; its longest:")
            lines += [f"  {seconds:7.1f} s  {nodeid}" for seconds, nodeid in longest]
        self.message = "\n".join(lines)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        message = getattr(self, "message", None)
        if message:
            terminalreporter.section("fast tier check", sep="=", red=True, bold=True)
            terminalreporter.line(message)

    def write(self, session):
        tier = re.sub(r"[^A-Za-z0-9]+", "-", self.config.getoption("markexpr") or "all").strip("-")
        cache = getattr(self.config, "cache", None)
        folder = Path(cache.mkdir("ece408")) if cache is not None else Path(str(self.config.option.basetemp or "."))
        path = folder / f"durations-{tier}.json"
        test_limit, total_limit = self.limits()
        path.write_text(json.dumps({
            "markexpr": self.config.getoption("markexpr"), "wall_s": round(time.monotonic() - self.started, 1),
            "limits_s": {"fast_tier_test": test_limit, "fast_tier_total": total_limit},
            "tests": {nodeid: {"call_s": round(t["call"], 3), "total_s": round(t["total"], 3), "fast": t["fast"]}
                      for nodeid, t in sorted(self.tests.items(), key=lambda kv: -kv[1]["total"])},
        }, indent=1) + "\n")
        self.path = path

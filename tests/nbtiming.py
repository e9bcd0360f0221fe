"""pytest plugin: wall time per notebook under nbval, printed after the run.

Every notebook should run in under 3 minutes on a 2-core CPU; this table shows
where each one stands, and marks the notebooks over the budget.  A speed limit
is a benchmark, not a pass/fail test: a reader's slower laptop or a busy CI
machine must not fail ``make test`` because a notebook took longer there.  The
limit fails the run only when asked for, with ``make bench-notebooks`` (which
sets ``GPUTRAIN_ENFORCE_NOTEBOOK_LIMIT=1``).
"""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

NOTEBOOK_LIMIT_S = float(os.environ.get("GPUTRAIN_NOTEBOOK_LIMIT_S", "180"))
ENFORCE = os.environ.get("GPUTRAIN_ENFORCE_NOTEBOOK_LIMIT", "").strip().lower() in {"1", "yes", "true"}
_times: dict[str, float] = defaultdict(float)


def over_limit(times: dict[str, float], limit: float = NOTEBOOK_LIMIT_S) -> dict[str, float]:
    """The notebooks whose summed wall time exceeds ``limit`` seconds."""
    return {p: t for p, t in times.items() if t > limit}


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    if path.endswith(".ipynb"):
        _times[path] += report.duration


def pytest_sessionfinish(session, exitstatus):
    if ENFORCE and over_limit(_times) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if not _times:
        return
    tr = terminalreporter
    tr.section("notebook wall time (nbval)")
    for path, seconds in sorted(_times.items()):
        flag = "  OVER BUDGET" if seconds > NOTEBOOK_LIMIT_S else ""
        tr.write_line(f"{seconds:7.1f} s  {path}{flag}")
    mode = "enforced" if ENFORCE else "reported only; make bench-notebooks enforces it"
    tr.write_line(f"{sum(_times.values()):7.1f} s  total (budget per notebook: {NOTEBOOK_LIMIT_S:.0f} s, {mode})")

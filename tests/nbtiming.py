"""pytest plugin: wall time per notebook under nbval, printed after the run.

Every notebook must run in under 3 minutes on a 2-core CPU; this table shows
where each one stands.  A notebook over NOTEBOOK_LIMIT_S fails the run.
"""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

NOTEBOOK_LIMIT_S = float(os.environ.get("GPUTRAIN_NOTEBOOK_LIMIT_S", "180"))
_times: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    if path.endswith(".ipynb"):
        _times[path] += report.duration


def pytest_sessionfinish(session, exitstatus):
    slow = {p: t for p, t in _times.items() if t > NOTEBOOK_LIMIT_S}
    if slow and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if not _times:
        return
    tr = terminalreporter
    tr.section("notebook wall time (nbval)")
    for path, seconds in sorted(_times.items()):
        flag = "  OVER LIMIT" if seconds > NOTEBOOK_LIMIT_S else ""
        tr.write_line(f"{seconds:7.1f} s  {path}{flag}")
    tr.write_line(f"{sum(_times.values()):7.1f} s  total (limit per notebook: {NOTEBOOK_LIMIT_S:.0f} s)")

"""The phases of ``make test`` and the wall time of each.

As a pytest plugin (``-p phases`` in pytest.ini) it sorts the run's tests into phases by file and,
after the run, prints each phase's span (wall clock from its first test's start to its last test's
end), its busy time (its tests' durations summed over every worker) and its count of tests.  Under
``pytest -n 2`` the phases run side by side in two workers, so their spans overlap; the table's last
line is the run's own wall time.

As a script, ``python tests/phases.py NAME COMMAND [NAME COMMAND ...]`` (what ``make test`` runs)
runs the commands one after the other in bash, every one even after a failure, prints a table of
their wall times with the pytest run's phases under its row, and exits with the first failing
command's status.  Every time in it is wall clock, as ``/usr/bin/time`` would give it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import defaultdict

# Which phase a test file belongs to: the first rule that matches its path (the test id before "::").
PHASES = (
    ("notebooks (nbval)", lambda path: path.endswith(".ipynb")),
    ("site: build and browser", lambda path: path == "tests/test_site.py"),
    ("PDF", lambda path: path == "tests/test_pdf.py"),
    ("Chinese editions", lambda path: path.startswith(("tests/test_notebooks_zh", "tests/test_translation"))),
    ("unit tests", lambda path: True),
)
# Where the script asks the plugin to leave the phases of its pytest run.
RESULT_ENV = "GPUTRAIN_PHASES_JSON"


def phase_of(nodeid: str) -> str:
    path = nodeid.split("::")[0]
    return next(name for name, matches in PHASES if matches(path))


class Phases:
    """The phases of one pytest run, from its test reports (under xdist: the workers' reports)."""

    def __init__(self):
        self.began = time.time()
        self.tests: dict[str, set[str]] = defaultdict(set)
        self.busy: dict[str, float] = defaultdict(float)
        self.start: dict[str, float] = {}
        self.stop: dict[str, float] = {}

    def add(self, report) -> None:
        name = phase_of(report.nodeid)
        self.tests[name].add(report.nodeid)
        self.busy[name] += report.duration
        self.start[name] = min(self.start.get(name, report.start), report.start)
        self.stop[name] = max(self.stop.get(name, report.stop), report.stop)

    def rows(self) -> list[dict]:
        """One row per phase that ran, in the order of PHASES; times in seconds from the run's start."""
        return [
            {
                "phase": name,
                "tests": len(self.tests[name]),
                "busy_s": round(self.busy[name], 1),
                "from_s": round(self.start[name] - self.began, 1),
                "to_s": round(self.stop[name] - self.began, 1),
            }
            for name, _ in PHASES
            if name in self.tests
        ]


def format_rows(rows: list[dict], indent: str = "") -> list[str]:
    return [
        f"{indent}{r['phase']:<26} span {r['to_s'] - r['from_s']:7.1f} s  ({r['from_s']:.0f} s to {r['to_s']:.0f} s)"
        f"  busy {r['busy_s']:7.1f} s  {r['tests']:4d} tests"
        for r in rows
    ]


# --- the pytest plugin ---------------------------------------------------------------


_phases: Phases | None = None  # on the controller (or in a run without xdist) only


def pytest_configure(config):
    global _phases
    if not hasattr(config, "workerinput"):
        _phases = Phases()


def pytest_runtest_logreport(report):
    if _phases is not None:
        _phases.add(report)


def pytest_terminal_summary(terminalreporter):
    if _phases is None or not _phases.tests:
        return
    rows = _phases.rows()
    terminalreporter.section("phases of this run (wall clock; under -n the spans overlap)")
    for line in format_rows(rows):
        terminalreporter.write_line(line)
    wall = time.time() - _phases.began
    terminalreporter.write_line(f"{'this pytest run':<26} wall {wall:7.1f} s")
    if os.environ.get(RESULT_ENV):
        with open(os.environ[RESULT_ENV], "w", encoding="utf-8") as f:
            json.dump(rows, f)


# --- the script ----------------------------------------------------------------------


def run_phases(steps: list[tuple[str, str]]) -> int:
    """Run each (name, bash command) in turn; print the table; return the first failure's status."""
    results, first_failure = [], 0
    for name, command in steps:
        result_file = f"/tmp/gputrain-phases-{os.getpid()}.json"
        began = time.monotonic()
        code = subprocess.run(["bash", "-c", command], env={**os.environ, RESULT_ENV: result_file}).returncode
        wall = time.monotonic() - began
        inner = []
        if os.path.exists(result_file):
            with open(result_file, encoding="utf-8") as f:
                inner = json.load(f)
            os.remove(result_file)
        results.append((name, wall, code, inner))
        first_failure = first_failure or code
    print("\nmake test: the phases as they ran (wall clock)")
    for name, wall, code, inner in results:
        print(f"{name:<28} {wall:8.1f} s  {'ok' if code == 0 else f'FAILED (exit {code})'}")
        for line in format_rows(inner, indent="  "):
            print(line)
    print(f"{'total':<28} {sum(r[1] for r in results):8.1f} s")
    return first_failure


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or len(args) % 2:
        sys.exit("usage: python tests/phases.py NAME COMMAND [NAME COMMAND ...]")
    sys.exit(run_phases(list(zip(args[0::2], args[1::2]))))

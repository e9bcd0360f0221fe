"""``make test`` runs pytest in two workers (pytest-xdist, ``-n 2 --dist loadfile``): what they share
must survive two processes at once, and the run still reports its notebooks' and phases' times."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from helpers import ROOT, accelerate_launch, build_once

sys.path.insert(0, str(ROOT / "book" / "tools"))

import phases  # noqa: E402
import translations as T  # noqa: E402

BUILD_TWICE = """
import sys, time
sys.path.insert(0, {tests!r})
from pathlib import Path
from helpers import build_once

def build():
    with open({log!r}, "a") as f:
        f.write("built\\n")
    time.sleep(1.0)
    return Path({folder!r}) / "html"

build_once(build, Path({folder!r}), sys.argv[1])
"""


def test_two_workers_of_one_run_build_the_site_once(tmp_path):
    """Two processes of one run ask for the site at once: one builds, the other waits and takes it;
    a later run (another id) builds again."""
    log = tmp_path / "log"
    script = BUILD_TWICE.format(tests=str(ROOT / "tests"), log=str(log), folder=str(tmp_path / "_build"))

    def start(run: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", script, run])

    workers = [start("run-1"), start("run-1")]
    assert [w.wait(timeout=120) for w in workers] == [0, 0]
    assert log.read_text().count("built") == 1
    assert start("run-2").wait(timeout=120) == 0
    assert log.read_text().count("built") == 2


def test_a_failed_build_is_not_taken_for_a_built_site(tmp_path):
    def broken():
        raise RuntimeError("sphinx warning")

    with pytest.raises(RuntimeError):
        build_once(broken, tmp_path, "run-1")
    calls = []
    build_once(lambda: calls.append(1) or tmp_path / "html", tmp_path, "run-1")
    assert calls == [1]  # the next worker builds again, and fails the same way if the book is broken


def test_a_catalog_is_never_half_written(tmp_path, monkeypatch):
    """The zh_CN catalogs are rewritten by every book build and read by the Chinese-notebook tests in
    the other worker: a reader must find the old catalog or the new one, never a truncated file."""
    path = tmp_path / "page.po"
    catalog = T.Catalog(locale="zh_CN")
    catalog.add("The loop", "循环")
    T.write_catalog(path, catalog)
    before = path.read_bytes()

    def interrupted(f, catalog, width):
        f.write(b'msgid ""\n')
        raise KeyboardInterrupt

    monkeypatch.setattr(T, "write_po", interrupted)
    with pytest.raises(KeyboardInterrupt):
        T.write_catalog(path, catalog)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["page.po"]


def test_every_accelerate_launch_of_the_tests_takes_a_free_port():
    """Accelerate's default rendezvous port, 29500, would be taken by whichever of two launch tests
    started first; the other would fail with 'port in use'."""
    command = accelerate_launch(2)
    assert command[command.index("--main_process_port") + 1] == "0"
    spelled_out = [
        path.name
        for path in (ROOT / "tests").glob("*.py")
        if path.name != "helpers.py" and re.search(r'"launch",\s*"--multi_gpu"', path.read_text(encoding="utf-8"))
    ]
    assert not spelled_out, f"use helpers.accelerate_launch() in {spelled_out}"


def test_the_phase_of_each_test_file():
    assert phases.phase_of("chapters/04_backprop.ipynb::Cell 3") == "notebooks (nbval)"
    assert phases.phase_of("tests/test_pdf.py::test_bookmarks") == "PDF"
    assert phases.phase_of("tests/test_site.py::test_x[en]") == "site: build and browser"
    assert phases.phase_of("tests/test_notebooks_zh.py::test_x") == "Chinese editions"
    assert phases.phase_of("tests/test_slice.py::test_x") == "unit tests"


def test_the_script_runs_every_phase_and_returns_the_first_failure(capsys):
    code = phases.run_phases([("first", "exit 3"), ("second", "sleep 0.2"), ("third", "exit 5")])
    assert code == 3
    out = capsys.readouterr().out
    rows = {
        line.split()[0]: line
        for line in out.splitlines()
        if line.split() and line.split()[0] in {"first", "second", "third", "total"}
    }
    assert "FAILED (exit 3)" in rows["first"] and "ok" in rows["second"] and "FAILED (exit 5)" in rows["third"]
    assert float(rows["second"].split()[1]) >= 0.2


def _notebook(path: Path, cells: list[str]) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


@pytest.mark.multiprocess
def test_two_workers_keep_a_notebook_in_one_kernel_and_report_its_time(tmp_path):
    """Under -n 2 --dist loadfile each notebook's cells run in order in one worker (a cell sees the
    one before it), and the controller still prints the notebook times (nbtiming) and the phases."""
    worker = 'import os; open("{name}.log", "a").write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")'
    for name in ("a", "b"):
        _notebook(
            tmp_path / f"{name}.ipynb",
            ["x = 1", worker.format(name=name), "x += 1", worker.format(name=name), "assert x == 2"],
        )
    (tmp_path / "test_unit.py").write_text("def test_one():\n    pass\n", encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path)]
        + ["-p", "no:cacheprovider", "--nbval-lax", "--nbval-current-env", "-p", "nbtiming", "-p", "phases"]
        + ["-n", "2", "--dist", "loadfile", "-v", "a.ipynb", "b.ipynb", "test_unit.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])},
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "11 passed" in run.stdout
    workers = {name: (tmp_path / f"{name}.log").read_text().split() for name in ("a", "b")}
    assert all(len(w) == 2 and len(set(w)) == 1 for w in workers.values()), workers  # one worker each
    table = run.stdout.split("notebook wall time (nbval)")[1]
    assert re.search(r"\d+\.\d s  a\.ipynb", table) and re.search(r"\d+\.\d s  b\.ipynb", table)
    assert re.search(r"notebooks \(nbval\)\s+span\s+[\d.]+ s .* 10 tests", run.stdout)
    assert re.search(r"unit tests\s+span .* 1 tests", run.stdout)


def test_each_worker_takes_its_share_of_the_cores(monkeypatch):
    from conftest import worker_threads

    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert worker_threads() is None  # a run without workers keeps torch's default
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    assert worker_threads() == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert worker_threads() == 8
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert worker_threads() == 1

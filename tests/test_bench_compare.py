"""bench/compare.py: two commands alternated, measured whole (issue 24's side-by-side check)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "compare.py"
# A allocates ~64 MiB more than B and burns a little CPU: the table must see both
A = f'{sys.executable} -c "b = bytearray(64 << 20); sum(range(3_000_000))"'
B = f"{sys.executable} -c pass"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def test_pairs_alternate_and_the_table_measures_time_and_memory(tmp_path):
    out = run("--a", A, "--b", B, "--names", "big,small", "--pairs", "3", "--json", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    stored = json.loads((tmp_path / "r.json").read_text())
    record, where = stored["data"], stored["provenance"]
    assert where["torch"] == torch.__version__ and where["date"] and "--pairs 3" in where["command"]
    assert record["cpu"] and record["cores"] >= 1 and record["b_revision"] is None  # no checkout for "small"
    assert record["names"] == ["big", "small"] and len(record["a"]) == len(record["b"]) == 3
    extra = [a["rss_mib"] - b["rss_mib"] for a, b in zip(record["a"], record["b"])]
    assert all(55 < e < 80 for e in extra), extra  # each run's own peak, not the parent's or the larger one's
    assert all(a["cpu_s"] > b["cpu_s"] for a, b in zip(record["a"], record["b"]))
    assert record["ratios"]["rss_mib"]["per_pair_ratio"] > 1
    assert (
        sum(line.startswith("pair ") for line in out.stdout.splitlines()) == 3
        and "big / small: median per-pair ratio" in out.stdout
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--a", "true"], "give --nanogpt PATH, or both --a and --b"),
        (["--a", "true", "--b", "true", "--pairs", "0"], "--pairs must be >= 1"),
        (["--nanogpt", "/nonexistent"], "no train.py there"),
        (["--a", "true", "--b", "true", "--names", "one"], "--names takes two names"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args, message):
    out = run(*args)
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_a_failing_command_stops_the_comparison_and_says_which():
    out = run("--a", f"{sys.executable} -c \"raise SystemExit('broken')\"", "--b", "true", "--pairs", "1")
    assert out.returncode == 1 and "exited 1" in out.stderr and "broken" in out.stderr


def test_process_cost_measures_one_whole_process_and_names_a_failure():
    """gputrain.speed.process_cost, which compare.py and "Making it fast" call: the child's own peak, not ours."""
    from gputrain.speed import process_cost

    big = process_cost([sys.executable, "-c", "b = bytearray(64 << 20); sum(range(3_000_000))"])
    small = process_cost([sys.executable, "-c", "pass"])
    assert 55 < big["rss_mib"] - small["rss_mib"] < 80 and big["cpu_s"] > small["cpu_s"] > 0
    assert big["wall_s"] > 0
    with pytest.raises(RuntimeError, match="exited 3:\nwent wrong"):
        process_cost([sys.executable, "-c", "import sys; print('went wrong', file=sys.stderr); sys.exit(3)"])

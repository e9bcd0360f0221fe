"""bench/record_rewards.py (make record-rewards): chapter 13's recorder runs end to end in its quick form."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDER = ROOT / "bench" / "record_rewards.py"


def record(out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(RECORDER), "--quick", "--out", str(out), *args],
        capture_output=True, text=True, timeout=900, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip


def test_the_recorder_runs_quick_and_writes_every_part(tmp_path):
    out = tmp_path / "q.json"
    r = record(out)
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads(out.read_text())["data"]
    assert data["quick"] is True and {"start", "grpo", "control", "lab", "igpt"} <= set(data)
    assert [run["seed"] for run in data["grpo"]["runs"]] == [0, 1]
    assert all([c["step"] for c in run["checkpoints"]] == [2, 4] for run in data["grpo"]["runs"])
    for run in data["grpo"]["runs"] + data["control"]["runs"]:
        assert run["checkpoints"] and all("4" in c["score"]["pass_at"] for c in run["checkpoints"])
    grpo = data["grpo"]["runs"][0]
    assert len(grpo["history"]) == grpo["steps"] == 4 and all(math.isfinite(x) for x in grpo["losses"])
    assert {"reward", "zero_groups", "entropy", "clip_fraction", "length_wrong"} <= set(grpo["history"][0])
    names = {run["name"] for run in data["lab"]["runs"]}
    assert names == {f"lab-{t}-{s}" for t in ("grpo", "dr_grpo", "dapo", "bnpo") for s in ("group", "none")}
    igpt = data["igpt"]
    assert igpt["pairs"] > igpt["val_pairs"] > 0 and 0 <= igpt["rm_accuracy"]["value"] <= 1
    assert set(igpt["ppo"]) == {"0.02", "0"} and set(igpt["dpo"]) == {"0.1"}
    for row in igpt["ppo"]["0.02"]["checkpoints"] + igpt["dpo"]["0.1"]["checkpoints"] + [igpt["start"]]:
        assert {"kl", "proxy", "gold", "exact"} <= set(row) and 0 <= row["gold"] <= 1
    assert abs(igpt["start"]["kl"]) < 1e-5  # the start against itself


def test_parts_are_rerecorded_alone_and_a_bad_part_is_one_line(tmp_path):
    out = tmp_path / "q.json"
    r = record(out, "--parts", "start,nonsense")
    assert r.returncode == 2 and "unknown ['nonsense']" in r.stderr and not out.exists()
    r = record(out, "--parts", "control")
    assert r.returncode == 2 and "needs the grpo part" in r.stderr and not out.exists()


def test_a_run_stopped_by_a_signal_ends_the_recording_with_nothing_written():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from record_posttrain import finished
    finally:
        sys.path.remove(str(ROOT / "bench"))

    class Run:
        interrupted, steps = None, 7

    assert finished(Run) is Run  # a run that reached its end goes on
    Run.interrupted = "SIGTERM"
    try:
        finished(Run)
    except SystemExit as exc:
        assert str(exc) == "stopped by SIGTERM after step 7: nothing was recorded"
    else:
        raise AssertionError("an interrupted run must end the recording")

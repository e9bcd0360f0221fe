"""bench/grpo_vs_trl.py --quick: gputrain rl and TRL's GRPOTrainer both run GRPO steps, alternated; the JSON says so."""

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_bench_quick

pytest.importorskip("trl", reason="TRL is not installed (make setup installs it with the book extra)")

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "grpo_vs_trl.py"


def test_quick_run_steps_both_sides_on_the_same_task_and_lengths(tmp_path):
    stored, printed = run_bench_quick(SCRIPT, tmp_path / "q.json")
    where, data = stored["provenance"], stored["data"]
    assert where["date"] and "--quick" in where["command"]
    assert set(data["versions"]) >= {"torch", "transformers", "trl", "git_commit"} and data["cpu"]
    rl, table = data["rl"], data["table"]
    rows = rl["problems"] * rl["group_size"]
    for side in ("gputrain", "trl"):
        (run,) = data["runs"][side]  # --quick: one run of each
        assert run["threads"] == 1 and run["timed_steps"] == data["steps"] - data["skipped_steps"]
        assert run["dtypes"] == ["torch.float32"] and len(run["losses"]) == data["steps"]
        # every step sampled G replies to each problem, each of exactly max_new_tokens tokens
        assert run["reply_tokens"] == [[rl["max_new_tokens"]] * rows] * data["steps"], side
        assert 0 < run["generate_s"] <= run["batch_s"] < run["step_s"] and 0 < run["learner_forward_s"] < run["step_s"]
        assert 0 < run["rollout_share"] < 1 and run["rss_mib"] >= run["rss_start_mib"] > 0
        assert table[side]["step_s"]["median"] == run["step_s"] and "AdamW" in run["optimizer"]
    trl = data["runs"]["trl"][0]
    assert trl["logit_diff"] < 1e-4 and trl["same_prompt_ids"]  # the GPT-2 twin: same function, same prompts
    assert table["gputrain"]["parameters"] == table["trl"]["parameters"]
    assert table["ratio"]["step_s"] == table["gputrain"]["step_s"]["median"] / table["trl"]["step_s"]["median"]
    lines = printed.splitlines()
    assert [line.split()[2] for line in lines if line.startswith("round 1")] == ["gputrain", "trl"]
    assert any(line.startswith("gputrain/TRL: seconds per step x") for line in lines)


def test_bad_arguments_are_one_line_and_exit_2():
    out = subprocess.run([sys.executable, str(SCRIPT), "--steps", "3"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "need --rounds >= 1 and --steps >= 5" in out.stderr, out.stderr

"""bench/sft_vs_trl.py --quick: gputrain sft and TRL's SFTTrainer both train, alternated, and the JSON says so."""

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_bench_quick

pytest.importorskip("trl", reason="TRL is not installed (make setup installs it with the book extra)")
pytest.importorskip("peft", reason="PEFT is not installed (make setup installs it with the book extra)")

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "sft_vs_trl.py"


def test_quick_run_trains_both_sides_on_the_same_tokens(tmp_path):
    stored, printed = run_bench_quick(SCRIPT, tmp_path / "q.json")
    where, data = stored["provenance"], stored["data"]
    stats = data["data"]
    assert where["date"] and "--quick" in where["command"]
    assert set(data["versions"]) >= {"torch", "transformers", "trl", "peft", "git_commit"} and data["cpu"]
    assert data["logit_diff_gpt2_twin"] < 1e-4  # the GPT-2 twin computes the base's function
    for mode in ("full", "lora"):
        row = data["table"][mode]
        for side in ("gputrain", "trl"):
            (run,) = data["runs"][mode][side]  # --quick: one run of each
            assert run["threads"] == 1 and run["timed_steps"] == data["steps"] - data["skipped_steps"]
            assert run["tokens"] == data["data"]["tokens_total"], (mode, side)  # one pass over the same tokens
            assert run["losses"][0] > max(run["losses"][-2:]), (mode, side, run["losses"])  # it learned
            assert run["tokens_per_s"] > 0 and run["rss_mib"] >= run["rss_start_mib"] > 0
            assert row[side]["tokens_per_s"]["median"] == run["tokens_per_s"] and "AdamW" in run["optimizer"]
            padding = run["positions_per_token"]  # input positions run per counted token: 1 would be no padding
            if side == "gputrain":  # every example padded to the longest of its file, one pass over them
                assert padding == stats["examples"] * stats["gputrain_padded_length"] / stats["tokens_total"]
            else:  # each batch to its own longest, measured from the batches TRL ran: lengths vary, so some
                # padding ran (a count of counted tokens alone would give exactly 1), and never more than
                # every example at the data set's longest (what one batch of all of them would run)
                assert stats["tokens_min"] < stats["tokens_max"]
                all_longest = stats["examples"] * stats["tokens_max"] / stats["tokens_total"]
                assert 1 < padding <= all_longest, (padding, all_longest)
        assert row["ratio"]["tokens_per_s"] == row["gputrain"]["tokens_per_s"]["median"] / run["tokens_per_s"]
    lora, full = data["table"]["lora"], data["table"]["full"]
    assert lora["gputrain"]["trainable"] == lora["trl"]["trainable"] < full["trl"]["trainable"]  # same adapters
    lines = printed.splitlines()
    assert [line.split()[3] for line in lines if line.startswith("repeat 1")] == ["gputrain", "trl"] * 2
    assert any(line.startswith("full  gputrain/TRL: tokens/s x") for line in lines)


def test_bad_arguments_are_one_line_and_exit_2():
    out = subprocess.run([sys.executable, str(SCRIPT), "--steps", "3"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "need --repeats >= 1 and --steps >= 7" in out.stderr, out.stderr

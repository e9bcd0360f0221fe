"""Regression tests for defects found using gputrain as a new user would (issue 13: b, c, d, k)."""

import pytest
import torch
from helpers import SMALL_GPT, cli_flags, run_cli, snapshot

from gputrain.data import TokenDataset
from gputrain.model import GPT, GPTConfig
from gputrain.train import CheckpointError, TrainConfig, train

TINY = cli_flags(**SMALL_GPT, corpus_bytes=20_000, warmup_steps=0, eval_interval=0)


@pytest.mark.parametrize("flag", ["--checkpoint-dir", "--log-dir"])
def test_a_directory_flag_naming_a_file_fails_before_training(tmp_path, flag):
    """b, c: it used to train every step, write metrics.csv, then die at the first save with a traceback."""
    target = tmp_path / "taken"
    target.write_text("not a directory")
    other = "--log-dir" if flag == "--checkpoint-dir" else "--checkpoint-dir"
    before = snapshot(tmp_path)
    out = run_cli("train", *TINY, "--max-steps", "3", flag, str(target), other, str(tmp_path / "other"))
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().count("\n") == 0 and "is a file; pass a directory" in out.stderr
    assert "Traceback" not in out.stderr and "trained" not in out.stdout
    assert snapshot(tmp_path) == before  # nothing written, not even the other directory


class Wider(GPT):
    """The same GPT with one parameter more: what a checkpoint of plain GPT lacks."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.extra = torch.nn.Parameter(torch.zeros(3))


def test_resuming_into_a_model_with_a_parameter_the_checkpoint_lacks(tmp_path):
    """d: check_compatible used to look one way only, so load_state_dict raised a raw RuntimeError."""
    cfg = GPTConfig(vocab_size=256, block_size=16, n_layer=1, n_head=2, n_embd=16)
    tokens = torch.randint(0, 256, (3000,), generator=torch.Generator().manual_seed(0))
    data = dict(train_data=TokenDataset(tokens, 16), val_data=TokenDataset(tokens[:300], 16))
    run = dict(batch_size=4, warmup_steps=0, eval_interval=0, progress=False, max_steps=2)
    train(TrainConfig(checkpoint_dir=str(tmp_path), **run), model=GPT(cfg), **data)
    with pytest.raises(CheckpointError, match="lacks extra that this model has"):
        train(TrainConfig(resume_from=str(tmp_path), **{**run, "max_steps": 4}), model=Wider(cfg), **data)


def test_resuming_with_another_optimizer_is_refused(tmp_path):
    base = ["train", *TINY, "--checkpoint-dir", str(tmp_path), "--quiet"]
    assert run_cli(*base, "--max-steps", "2").returncode == 0
    out = run_cli(*base, "--max-steps", "4", "--resume-from", str(tmp_path), "--optimizer", "sgd")
    assert out.returncode == 2 and "optimizer='adamw'" in out.stderr and "--optimizer adamw" in out.stderr


def test_no_progress_prints_one_summary_line_and_quiet_prints_nothing(tmp_path):
    """k: --no-progress used to print nothing at all at the end of a run (issue 30: and it keeps the data: line)."""
    out = run_cli(
        "train",
        *TINY,
        "--max-steps",
        "3",
        "--no-progress",
        "--log-dir",
        str(tmp_path / "log"),
        "--checkpoint-dir",
        str(tmp_path / "ckpt"),
    )
    assert out.returncode == 0, out.stderr
    data, *lines = out.stdout.strip().splitlines()
    assert data.startswith("data: the first 20,000 bytes of stdlib")
    assert len(lines) == 1 and lines[0].startswith("trained 3 steps")
    assert "tokens/s" in lines[0] and str(tmp_path / "log" / "metrics.csv") in lines[0]
    assert str(tmp_path / "ckpt" / "step_00000003") in lines[0]
    quiet = run_cli("train", *TINY, "--max-steps", "3", "--quiet")
    assert quiet.returncode == 0 and quiet.stdout == ""

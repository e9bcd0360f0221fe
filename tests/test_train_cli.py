"""`gputrain train` from the command line: bad input, resume, and a real 2-process launch."""

import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import accelerate_launch, snapshot

from gputrain import train as T
from gputrain.cli import main
from gputrain.train import checkpoint as C

FLAGS = [
    "--n-layer",
    "1",
    "--n-head",
    "2",
    "--n-embd",
    "32",
    "--block-size",
    "32",
    "--batch-size",
    "8",
    "--corpus-bytes",
    "30000",
    "--warmup-steps",
    "2",
    "--eval-interval",
    "0",
    "--no-progress",
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A finished run with a checkpoint and a log, which the bad calls below must leave alone."""
    root = tmp_path_factory.mktemp("run")
    assert (
        main(
            [
                "train",
                *FLAGS,
                "--max-steps",
                "4",
                "--checkpoint-dir",
                str(root / "ckpt"),
                "--log-dir",
                str(root / "log"),
            ]
        )
        == 0
    )
    (root / "empty.txt").write_text("")
    corrupt = root / "corrupt"
    shutil.copytree(root / "ckpt", corrupt)
    model = C.find_checkpoint(corrupt) / "model.safetensors"
    model.write_bytes(model.read_bytes()[:100])
    return root


def bad_calls(root: Path) -> dict[str, list[str]]:
    ckpt, log = str(root / "ckpt"), str(root / "log")
    return {
        "missing data file": ["--data", str(root / "missing.txt"), "--checkpoint-dir", ckpt],
        "empty corpus": ["--data", str(root / "empty.txt"), "--log-dir", log],
        "sequence longer than the context": ["--seq-len", "64", "--log-dir", log],
        "unknown preset": ["--preset", "gpt5", "--log-dir", log],
        "checkpoint of another shape": [
            "--n-embd",
            "64",
            "--resume-from",
            ckpt,
            "--checkpoint-dir",
            ckpt,
            "--log-dir",
            log,
        ],
        "corrupt checkpoint": ["--resume-from", str(root / "corrupt"), "--checkpoint-dir", ckpt, "--log-dir", log],
        "fresh run into a used directory": ["--checkpoint-dir", ckpt],
    }


EXPECTED = {
    "missing data file": "data file '.*missing.txt' not found",
    "empty corpus": "empty.txt' is empty",
    "sequence longer than the context": "seq_len=64 exceeds the model's context block_size=32",
    "unknown preset": "invalid choice: 'gpt5'",
    "checkpoint of another shape": r"holds a different model: n_embd=32 \(this run: 64\)",
    "corrupt checkpoint": "is corrupt or incomplete",
    "fresh run into a used directory": "already holds another run's files",
}


def call(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own usage errors exit directly (same code 2)
        return exc.code


@pytest.mark.parametrize("case", list(EXPECTED))
def test_bad_input_is_one_line_exit_2_and_nothing_is_overwritten(run_dir, case, capsys):
    import re

    before = snapshot(run_dir)
    code = call(["train", *FLAGS, "--max-steps", "8", *bad_calls(run_dir)[case]])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip().count("\n") == 0 and "error:" in err and "Traceback" not in err
    assert re.search(EXPECTED[case], err), err
    assert snapshot(run_dir) == before


def test_cli_resumes_a_run(run_dir, tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(run_dir / "ckpt", ckpt)
    log = ["--log-dir", str(tmp_path / "log")]  # a copy's own log: run_dir's log belongs to run_dir
    assert (
        main(["train", *FLAGS, "--max-steps", "6", "--resume-from", str(ckpt), "--checkpoint-dir", str(ckpt), *log])
        == 0
    )
    assert [p.name for p in C.list_checkpoints(ckpt)] == ["step_00000004", "step_00000006"]


@pytest.mark.multiprocess
def test_two_processes_equal_one_process_with_the_doubled_batch(tmp_path):
    """`accelerate launch -m gputrain train` on 2 gloo processes, batch 4 each, vs 1 process with batch 8.

    DDP averages the two ranks' gradients; rank r takes batches r, r+2, ... of the
    same permutation, which together are exactly the 1-process batches of 8.
    """
    flags = [f for f in FLAGS if f != "--no-progress"] + ["--max-steps", "10", "--eval-interval", "5"]
    flags[flags.index("--batch-size") + 1] = "4"
    proc = subprocess.run(
        [
            *accelerate_launch(2),
            "-m",
            "gputrain",
            "train",
            *flags,
            "--log-dir",
            str(tmp_path),
            "--checkpoint-dir",
            str(tmp_path / "c"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("trained 10 steps") == 1  # the summary comes from the main process only
    two = T.read_history(tmp_path / "metrics.csv")
    one = T.train(
        T.TrainConfig(
            n_layer=1,
            n_head=2,
            n_embd=32,
            block_size=32,
            batch_size=8,
            corpus_bytes=30_000,
            warmup_steps=2,
            max_steps=10,
            eval_interval=5,
            progress=False,
        )
    )
    assert two["loss"] == pytest.approx(one.losses, rel=1e-4)
    assert [v for v in two["val_loss"] if v == v] == pytest.approx([v for _, v in one.val_losses], rel=1e-4)
    assert two["loss"][-1] < two["loss"][0] - 0.5  # and it did learn
    # issue 30: its checkpoint resumed in one process silently, on half the global batch
    assert C.read_checkpoint(tmp_path / "c").meta["run"]["world_size"] == 2
    resume = ["train", "--resume-from", str(tmp_path / "c"), "--max-steps", "12", "--log-dir", str(tmp_path / "1")]
    assert main(resume) == 2
    assert main([*resume, "--allow-config-change", "--quiet"]) == 0
    assert C.read_checkpoint(tmp_path / "c").meta["progress"]["batch"] == 2 * 10 + 2  # 20 batches of 4 were done


def test_launcher_precision_is_used_unless_the_flag_is_given(monkeypatch):
    """accelerate launch --mixed_precision sets ACCELERATE_MIXED_PRECISION; gputrain train honours it."""
    import types

    import gputrain.train
    from gputrain import cli

    seen = []

    def fake(cfg, **kwargs):  # the command imports train() when it runs: replace it where it comes from
        seen.append(cfg.mixed_precision)
        return types.SimpleNamespace(interrupted=None, is_main_process=True, config=cfg)

    monkeypatch.setattr(gputrain.train, "train", fake)
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    assert cli.main(["train", "--max-steps", "1", "--warmup-steps", "0", "--quiet"]) == 0
    assert cli.main(["train", "--max-steps", "1", "--warmup-steps", "0", "--mixed-precision", "no", "--quiet"]) == 0
    assert seen == ["bf16", "no"]

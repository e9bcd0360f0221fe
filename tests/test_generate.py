"""gputrain sample / eval on a trained checkpoint, in Python and on the command line; their bad input."""

import math
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import SMALL_GPT, as_at_a_terminal, run_cli

from gputrain.train import CheckpointError, TrainConfig, evaluate_text, sample, stream_samples, train


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    ckpt = tmp_path_factory.mktemp("ckpt")
    cfg = TrainConfig(**SMALL_GPT, corpus_bytes=40_000, max_steps=30, warmup_steps=3, eval_interval=0,
                      progress=False, checkpoint_dir=str(ckpt))  # fmt: skip
    return train(cfg), ckpt


def test_sample_is_seeded_and_starts_with_the_prompt(trained):
    _, ckpt = trained
    a = sample(ckpt, prompt="def ", tokens=40, seed=3)
    assert a.startswith("def ") and len(a.encode()) >= 40
    assert a == sample(ckpt, prompt="def ", tokens=40, seed=3)
    assert a != sample(ckpt, prompt="def ", tokens=40, seed=4)


def test_stream_yields_the_sample_piece_by_piece_with_or_without_the_cache(trained):
    _, ckpt = trained
    text = sample(ckpt, prompt="é ", tokens=80, seed=5)  # 80 > block_size 32: past the context too
    pieces = list(stream_samples(ckpt, prompt="é ", tokens=80, seed=5))
    assert pieces[0] == (0, "é ") and len(pieces) > 2 and "".join(p for _, p in pieces) == text
    uncached = stream_samples(ckpt, prompt="é ", tokens=80, seed=5, use_cache=False)
    assert "".join(p for _, p in uncached) == text
    two = list(stream_samples(ckpt, prompt="x", tokens=20, seed=5, num_samples=2))
    first, second = ("".join(p for n, p in two if n == i) for i in (0, 1))
    assert first.startswith("x") and second.startswith("x") and first != second  # one generator, drawn on


def test_eval_on_the_validation_split_matches_the_loss_definitions(trained):
    result, ckpt = trained
    r = evaluate_text(ckpt, max_batches=4, batch_size=8)
    assert r["perplexity"] == pytest.approx(math.exp(r["loss"]))
    assert r["bits_per_byte"] == pytest.approx(r["loss"] / math.log(2))
    assert r["held_out"] == f"the first 32 of {r['windows_in_text']} windows of the run's validation split"
    assert r["tokens"] == 4 * 8 * 32
    assert r["loss"] < math.log(256)  # better than guessing among 256 bytes
    assert evaluate_text(result.model, max_batches=4, batch_size=8)["tokens"] == 4 * 8 * 32


def test_cli_sample_and_eval(trained, tmp_path):
    _, ckpt = trained
    out = run_cli(
        "sample",
        "--checkpoint",
        str(ckpt),
        "--prompt",
        "def ",
        "--tokens",
        "30",
        "--temperature",
        "0.8",
        "--top-k",
        "40",
        "--seed",
        "1",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("def ")
    text = tmp_path / "held_out.txt"
    text.write_text("def f(x):\n    return x + 1\n" * 60)
    out = run_cli("eval", "--checkpoint", str(ckpt), "--data", str(text))
    assert out.returncode == 0, out.stderr
    assert "perplexity" in out.stdout and "bits/byte" in out.stdout and "windows of all 1,620 bytes of it" in out.stdout


def test_eval_on_a_file_says_exactly_what_it_scored(trained, tmp_path):
    """Issue 30: it printed 'all of it' after scoring eval_batches x batch_size windows of at most 400,000 bytes."""
    _, ckpt = trained
    text = tmp_path / "big.txt"
    text.write_text("def f(x):\n    return x + 1\n" * 20_000)  # 540,000 bytes
    r = evaluate_text(ckpt, str(text), max_batches=2, batch_size=4)
    assert (r["windows"], r["tokens"], r["bytes_read"], r["bytes_on_disk"]) == (8, 8 * 32, 400_000, 540_000)
    assert r["held_out"] == (
        f"the first 8 of {r['windows_in_text']:,} windows of the first 400,000 bytes of its 540,000 bytes on disk "
        "(capped by corpus_bytes)"
    )
    out = run_cli("eval", "--checkpoint", str(ckpt), "--data", str(text), "--max-batches", "2", "--batch-size", "4")
    assert out.returncode == 0 and r["held_out"] in out.stdout, out.stderr
    assert f"--max-batches {-(-r['windows_in_text'] // 4)} scores them all" in out.stdout
    whole = evaluate_text(ckpt, str(text), corpus_bytes=0, max_batches=10_000, batch_size=512)
    assert whole["windows"] == whole["windows_in_text"] == (540_000 - 1) // 32
    assert whole["held_out"] == f"all {whole['windows']:,} windows of all 540,000 bytes of it"


def test_cli_num_samples_and_prompt_file(trained, tmp_path):
    _, ckpt = trained
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("class A:\n    def ", encoding="utf-8")
    out = run_cli("sample", "--checkpoint", str(ckpt), "--prompt-file", str(prompt), "--tokens", "12",
                  "--num-samples", "3")  # fmt: skip
    assert out.returncode == 0, out.stderr
    samples = out.stdout.split("\n---------------\n")
    assert len(samples) == 3 and all(s.startswith("class A:\n    def ") for s in samples)
    assert samples[0] + "\n" == sample(ckpt, prompt="class A:\n    def ", tokens=12, seed=1) + "\n"


def test_cli_sample_streams_and_ctrl_c_keeps_what_was_printed(trained):
    # 100,000 bytes would take minutes: the first bytes must appear at once, and Ctrl-C ends it cleanly
    _, ckpt = trained
    cmd = [sys.executable, "-m", "gputrain", "sample", "--checkpoint", str(ckpt), "--prompt", "def "]
    proc = subprocess.Popen(
        cmd + ["--tokens", "100000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=as_at_a_terminal
    )
    got = os.read(proc.stdout.fileno(), 4)
    while len(got) < 40:  # the prompt, then generated bytes, before the run could have finished
        got += os.read(proc.stdout.fileno(), 64)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()[-800:]
    assert got.startswith(b"def ") and b"Traceback" not in err and err.strip() == b""
    assert 40 <= len(got + rest) < 100_000


@pytest.mark.parametrize(
    "args, message",
    [
        (["sample", "--checkpoint", "{missing}"], "no checkpoint in"),
        (["sample", "--checkpoint", "{ckpt}", "--temperature", "0"], "temperature must be a positive"),
        (["sample", "--checkpoint", "{ckpt}", "--tokens", "0"], "tokens must be >= 1"),
        (["sample", "--checkpoint", "{ckpt}", "--prompt", ""], "prompt is empty"),
        (["sample", "--checkpoint", "{ckpt}", "--top-k", "-1"], "top_k must be"),
        (["sample", "--checkpoint", "{ckpt}", "--num-samples", "0"], "num_samples must be >= 1"),
        (["sample", "--checkpoint", "{ckpt}", "--num-samples", "two"], "invalid int value: 'two'"),
        (["sample", "--checkpoint", "{ckpt}", "--tokens", "-5"], "tokens must be >= 1"),
        (["sample", "--checkpoint", "{ckpt}", "--prompt-file", "{missing}/p.txt"], "not found"),
        (["sample", "--checkpoint", "{ckpt}", "--prompt-file", "{tmp}"], "is a directory"),
        (["sample", "--checkpoint", "{ckpt}", "--prompt-file", "{binary}"], "is not UTF-8 text"),
        (["sample", "--checkpoint", "{ckpt}", "--prompt-file", "{empty}"], "prompt is empty"),
        (["sample", "--checkpoint", "{ckpt}", "--prompt", "a", "--prompt-file", "{empty}"], "not both"),
        (["eval", "--checkpoint", "{ckpt}", "--data", "{missing}/x.txt"], "not found"),
        (["eval", "--checkpoint", "{corrupt}"], "corrupt or incomplete"),
    ],
)
def test_bad_input_is_one_line_exit_2(trained, tmp_path, args, message):
    _, ckpt = trained
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "manifest.json").write_text("{not json")
    (tmp_path / "binary").write_bytes(b"\xff\xfe\x00 not text")
    (tmp_path / "empty").write_text("")
    names = dict(binary=tmp_path / "binary", empty=tmp_path / "empty", tmp=tmp_path)
    args = [a.format(ckpt=ckpt, missing=tmp_path / "nothing", corrupt=corrupt, **names) for a in args]
    out = run_cli(*args)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().count("\n") == 0 and message in out.stderr and "Traceback" not in out.stderr


def test_a_custom_model_checkpoint_is_refused_clearly(tmp_path):
    import torch

    from gputrain.data import TokenDataset
    from gputrain.model import GPT, GPTConfig

    tokens = torch.randint(0, 256, (4000,))
    model = GPT(GPTConfig(vocab_size=256, block_size=16, n_layer=1, n_head=2, n_embd=16))
    train(
        TrainConfig(
            max_steps=2, batch_size=4, warmup_steps=0, eval_interval=0, progress=False, checkpoint_dir=str(tmp_path)
        ),
        model=model,
        train_data=TokenDataset(tokens, 16),
        val_data=TokenDataset(tokens[:400], 16),
    )
    with pytest.raises(CheckpointError, match="custom model"):
        sample(tmp_path)

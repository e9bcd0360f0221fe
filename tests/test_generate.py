"""gputrain sample / eval on a trained checkpoint, in Python and on the command line; their bad input."""

import math

import pytest
from helpers import SMALL_GPT, run_cli

from gputrain.train import CheckpointError, TrainConfig, evaluate_text, sample, train


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


def test_eval_on_the_validation_split_matches_the_loss_definitions(trained):
    result, ckpt = trained
    r = evaluate_text(ckpt, max_batches=4, batch_size=8)
    assert r["perplexity"] == pytest.approx(math.exp(r["loss"]))
    assert r["bits_per_byte"] == pytest.approx(r["loss"] / math.log(2))
    assert r["held_out"] == "the run's validation split" and r["tokens"] == 4 * 8 * 32
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
    assert "perplexity" in out.stdout and "bits/byte" in out.stdout and "all of it" in out.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["sample", "--checkpoint", "{missing}"], "no checkpoint in"),
        (["sample", "--checkpoint", "{ckpt}", "--temperature", "0"], "temperature must be a positive"),
        (["sample", "--checkpoint", "{ckpt}", "--tokens", "0"], "tokens must be >= 1"),
        (["sample", "--checkpoint", "{ckpt}", "--prompt", ""], "prompt is empty"),
        (["sample", "--checkpoint", "{ckpt}", "--top-k", "-1"], "top_k must be"),
        (["eval", "--checkpoint", "{ckpt}", "--data", "{missing}/x.txt"], "not found"),
        (["eval", "--checkpoint", "{corrupt}"], "corrupt or incomplete"),
    ],
)
def test_bad_input_is_one_line_exit_2(trained, tmp_path, args, message):
    _, ckpt = trained
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "manifest.json").write_text("{not json")
    args = [a.format(ckpt=ckpt, missing=tmp_path / "nothing", corrupt=corrupt) for a in args]
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

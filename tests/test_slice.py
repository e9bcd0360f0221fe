"""The vertical slice: corpus -> tokens -> GPT -> Accelerate loop, end to end."""

import math

import pytest
import torch

from gputrain import data
from gputrain.model import GPT, GPTConfig
from gputrain.train import TrainConfig, lr_lambda, train


@pytest.mark.parametrize("text", ["plain ascii", "中文：梯度下降與反向傳播", "emoji 🚀 and\x00nul", ""])
def test_byte_tokenizer_round_trips(text):
    tok = data.ByteTokenizer()
    ids = tok.encode(text)
    assert all(0 <= i < 256 for i in ids)
    assert tok.decode(ids) == text


def test_corpus_is_offline_python_source():
    text = data.python_corpus(max_bytes=50_000)
    assert 45_000 <= len(text.encode()) <= 50_000
    assert "def " in text and "import " in text


def test_token_dataset_pairs_are_shifted_by_one():
    tokens = torch.arange(100)
    ds = data.TokenDataset(tokens, block_size=8)
    assert len(ds) == 12
    x, y = ds[3]
    assert torch.equal(x, torch.arange(24, 32)) and torch.equal(y, torch.arange(25, 33))


def test_gpt_shapes_and_initial_loss_near_uniform():
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=256, block_size=32, n_layer=2, n_head=4, n_embd=64)
    model = GPT(cfg)
    idx, targets = torch.randint(0, 256, (2, 3, 32))
    logits, loss = model(idx, targets)
    assert logits.shape == (3, 32, 256)
    assert abs(loss.item() - math.log(256)) < 0.1  # a fresh model is close to uniform
    with pytest.raises(ValueError, match="block_size"):
        model(torch.zeros(1, 33, dtype=torch.long))


def test_lr_schedule_warms_up_then_decays_to_floor():
    cfg = TrainConfig(max_steps=100, warmup_steps=10, min_lr_ratio=0.1)
    f = lr_lambda(cfg)
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(55) == pytest.approx(0.55, abs=0.01)
    assert f(100) == pytest.approx(0.1)


def test_tiny_gpt_loss_falls():
    result = train(TrainConfig(max_steps=120, corpus_bytes=200_000, progress=False, eval_interval=60))
    first = sum(result.losses[:10]) / 10
    last = sum(result.losses[-10:]) / 10
    assert first > 5.0  # ~ln(256) = 5.55 at the start
    assert last < 3.0, f"loss only fell from {first:.2f} to {last:.2f}"
    assert [s for s, _ in result.val_losses] == [60, 120]
    assert result.val_losses[-1][1] < result.val_losses[0][1] + 0.5


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"lr": -1.0}, "lr must be a positive"),
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"n_embd": 30, "n_head": 4}, "not divisible by n_head"),
        ({"warmup_steps": 500, "max_steps": 100}, "exceeds max_steps"),
        ({"mixed_precision": "fp4"}, "mixed_precision='fp4' is not one of"),
    ],
)
def test_bad_config_one_clear_error(bad, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**bad)

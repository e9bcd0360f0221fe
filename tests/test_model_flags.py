"""The model's switches as `gputrain train` flags (nanoGPT's bias, weight tying, dropout), end to end."""

import pytest
import torch.nn as nn
from helpers import SMALL_GPT, cli_flags

from gputrain.cli import main
from gputrain.model import count_params, gpt_num_params
from gputrain.train import load_model

RUN = cli_flags(**SMALL_GPT, corpus_bytes=20_000, max_steps=2, warmup_steps=0, eval_interval=0, progress=False)


def _trained(tmp_path, *flags):
    """The model a 2-step CLI run with ``flags`` saved."""
    assert main(["train", *RUN, "--checkpoint-dir", str(tmp_path / "ckpt"), *flags]) == 0
    model, _ = load_model(tmp_path / "ckpt")
    assert count_params(model) == gpt_num_params(model.cfg)  # the closed form follows every switch
    return model


def _biases(model) -> list:
    layers = [m for m in model.modules() if isinstance(m, (nn.Linear, nn.LayerNorm))]
    return [m.bias for m in layers if m.bias is not None]


@pytest.mark.parametrize("flag, has_bias", [("--bias", True), ("--no-bias", False)])
def test_bias_flag_adds_or_removes_every_bias(tmp_path, flag, has_bias):
    model = _trained(tmp_path, flag)
    assert model.cfg.bias is has_bias
    assert bool(_biases(model)) is has_bias


@pytest.mark.parametrize("flag, tied", [("--tie-embeddings", True), ("--no-tie-embeddings", False)])
def test_tie_embeddings_flag_shares_or_separates_the_head(tmp_path, flag, tied):
    model = _trained(tmp_path, flag)
    assert model.cfg.tie_embeddings is tied
    assert (model.head.weight is model.wte.weight) is tied
    if not tied:  # its own matrix, trained and saved on its own
        assert not model.head.weight.equal(model.wte.weight)


def test_dropout_flag_reaches_every_dropout(tmp_path):
    model = _trained(tmp_path, "--dropout", "0.25")
    drops = [m.p for m in model.modules() if isinstance(m, nn.Dropout)]
    assert model.cfg.dropout == 0.25 and drops and set(drops) == {0.25}
    assert {b.attn.dropout for b in model.blocks} == {0.25}  # SDPA's attention dropout too


def test_bad_dropout_is_one_line(capsys):
    assert main(["train", "--dropout", "1.5"]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "dropout" in err

"""Issue 32: the forgetting ledger's measures: bits per byte on the pretraining text, the rank of an update."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from gputrain.model import GPT, GPTConfig
from gputrain.posttrain import (
    ChatFormat,
    apply_lora,
    chat_model,
    energy_rank,
    text_bits_per_byte,
    update_ranks,
    weight_updates,
)

ROOT = Path(__file__).resolve().parents[1]


def tiny(vocab=256) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=vocab, block_size=16, n_layer=1, n_head=2, n_embd=16))


def test_bits_per_byte_is_the_mean_cross_entropy_in_bits_over_every_window():
    model, tokens = tiny(), torch.randint(0, 256, (16 * 5 + 1,))
    logits = model(tokens[:80].view(5, 16))[0]
    nats = F.cross_entropy(logits.flatten(0, 1), tokens[1:81])
    assert text_bits_per_byte(model, tokens) == pytest.approx(nats.item() / math.log(2), rel=1e-6)
    assert text_bits_per_byte(model, tokens, max_windows=2) != text_bits_per_byte(model, tokens)
    grown = chat_model(model, ChatFormat())  # four more logits: the bytes keep theirs, so only mass moves
    assert text_bits_per_byte(grown, tokens, bytes_only=True) == pytest.approx(text_bits_per_byte(model, tokens))
    assert text_bits_per_byte(grown, tokens) > text_bits_per_byte(model, tokens)
    with pytest.raises(ValueError, match="cannot fill one window"):
        text_bits_per_byte(model, tokens[:10])


@pytest.mark.parametrize("r", [1, 3, 8])
def test_energy_rank_of_a_matrix_of_known_singular_values(r):
    u, _ = torch.linalg.qr(torch.randn(20, 20, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(12, 12, dtype=torch.float64))
    s = torch.zeros(12, dtype=torch.float64)
    s[:r] = torch.linspace(2, 1, r)  # energy shares known exactly
    delta = u[:, :12] @ torch.diag(s) @ v.T
    assert energy_rank(delta, 1.0) == r
    shares = torch.cumsum(s**2, 0) / (s**2).sum()
    assert energy_rank(delta, 0.9) == int((shares < 0.9).sum()) + 1
    assert energy_rank(torch.zeros(4, 4)) == 0


def test_a_lora_update_has_at_most_its_rank():
    base = chat_model(tiny(), ChatFormat())
    tuned = chat_model(tiny(), ChatFormat())
    apply_lora(tuned, 2, 4.0)
    for layer in tuned.modules():
        if hasattr(layer, "lora_B"):
            torch.nn.init.normal_(layer.lora_B)
    deltas = weight_updates(base, tuned)
    assert set(deltas) == {"blocks.0.attn.qkv", "blocks.0.attn.proj", "blocks.0.mlp.fc", "blocks.0.mlp.proj"}
    assert all(torch.linalg.matrix_rank(d) == 2 for d in deltas.values())
    assert all(r <= 2 for r in update_ranks(base, tuned, energy=1.0).values())


def test_the_recorder_runs_quick_and_writes_every_experiment(tmp_path):
    out = tmp_path / "q.json"
    r = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "record_posttrain.py"), "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads(out.read_text())["data"]
    names = {run["name"] for run in data["runs"]}
    assert {"full-s0", "full-s1", "curve-n100", "lora-r1", "lora-r4"} <= names
    assert all(math.isfinite(run["bpb_after"]) and run["steps"] == 30 for run in data["runs"])
    assert set(data["update_rank90"]) == {
        f"blocks.{i}.{n}" for i in range(2) for n in ("attn.qkv", "attn.proj", "mlp.fc", "mlp.proj")
    }
    assert len(data["base"]["few_shot"]) == 2 and "16" in data["runs"][0]["score"]["pass_at"]

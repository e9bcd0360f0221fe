"""gputrain.memory: activation checkpointing and the memory estimator (chapter 7)."""

import copy

import pytest
import torch

from gputrain.memory import apply_activation_checkpointing, is_checkpointed, remove_activation_checkpointing
from gputrain.model import GPT, MLP, GPTConfig


def _loss_and_grads(model, idx, targets, seed):
    torch.manual_seed(seed)  # same dropout masks in both runs
    model.zero_grad(set_to_none=True)
    logits, loss = model(idx, targets)
    loss.backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_checkpointing_gives_identical_outputs_and_gradients(dropout):
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=64, block_size=16, n_layer=3, n_head=2, n_embd=32, dropout=dropout)
    plain = GPT(cfg)
    ckpt = apply_activation_checkpointing(copy.deepcopy(plain))
    assert is_checkpointed(ckpt) and not is_checkpointed(plain)
    assert list(ckpt.state_dict()) == list(plain.state_dict())  # names unchanged
    idx, targets = torch.randint(0, 64, (2, 4, 16))
    ref_logits, ref_grads = _loss_and_grads(plain, idx, targets, seed=1)
    logits, grads = _loss_and_grads(ckpt, idx, targets, seed=1)
    torch.testing.assert_close(logits, ref_logits, rtol=0, atol=0)
    assert grads.keys() == ref_grads.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=0, atol=0, msg=name)


def _saved_tensor_count(model, idx):
    count = [0]

    def pack(t):
        count[0] += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(idx, idx)
    return count[0]


def test_checkpointing_recomputes_blocks_in_backward(monkeypatch):
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32)
    model = GPT(cfg)
    idx = torch.randint(0, 64, (2, 16))
    stored_plain = _saved_tensor_count(model, idx)
    apply_activation_checkpointing(model)
    assert _saved_tensor_count(model, idx) < stored_plain / 2  # blocks keep only their inputs
    calls = []
    gelu = torch.nn.functional.gelu
    monkeypatch.setattr(torch.nn.functional, "gelu", lambda x: calls.append(1) or gelu(x))
    _, loss = model(idx, idx)
    assert len(calls) == 2  # one forward per block
    loss.backward()
    assert len(calls) == 4  # ...and one recomputation per block
    with torch.no_grad():
        model(idx)
    assert len(calls) == 6  # a no-grad forward is not checkpointed
    remove_activation_checkpointing(model)
    assert not is_checkpointed(model) and _saved_tensor_count(model, idx) == stored_plain


def test_checkpointing_other_block_types_and_errors():
    cfg = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32)
    model = apply_activation_checkpointing(GPT(cfg), block_types=[MLP])
    assert sum(getattr(m, "_gputrain_checkpointed", False) for m in model.modules()) == 2
    apply_activation_checkpointing(model, block_types=[MLP])  # twice is harmless
    with pytest.raises(ValueError, match="block_types"):
        apply_activation_checkpointing(GPT(cfg), block_types=[torch.nn.Conv2d])
    with pytest.raises(ValueError, match="nn.Module subclasses"):
        apply_activation_checkpointing(GPT(cfg), block_types=["Block"])

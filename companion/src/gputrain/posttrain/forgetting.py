"""What fine-tuning costs the pretrained model: bits per byte on its own text, and the rank of the update (chapter 12).

:func:`text_bits_per_byte` scores a model on held-out pretraining text, so the
same number read before and after fine-tuning is the forgetting ledger's entry
(a fine-tuned model is scored over its whole vocabulary: the probability it
now puts on the reserved tokens in the middle of Python is part of what it
forgot).  :func:`weight_updates` and :func:`energy_rank` ask how low-rank a
full fine-tune's update is: the smallest rank whose singular values hold a
given share of the update's energy (squared Frobenius norm).  If a rank-4
matrix holds 90% of it, LoRA at rank 4 could have made most of the same move.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..model import GPT
from .lora import DEFAULT_TARGETS, lora_layers, matches


@torch.no_grad()
def text_bits_per_byte(
    model: GPT, tokens: torch.Tensor, window: int = 0, max_windows: int = 256, bytes_only: bool = False
) -> float:
    """Mean bits per byte of ``model`` predicting ``tokens`` (N,) byte ids, in non-overlapping windows.

    ``window``: tokens per window (default: the model's context); at most
    ``max_windows`` windows from the start are scored.  Every target is a byte,
    so a model with reserved tokens pays for any probability it gives them;
    ``bytes_only`` renormalises over the 256 byte logits instead, which asks
    only how well it still ranks the bytes against each other.
    """
    T = window or model.cfg.block_size
    n = min((len(tokens) - 1) // T, max_windows)
    if n < 1:
        raise ValueError(f"{len(tokens)} tokens cannot fill one window of {T} + 1; pass more text")
    x = tokens[: n * T].view(n, T).long()  # (n, T)
    y = tokens[1 : n * T + 1].view(n, T).long()  # (n, T)
    was = model.training
    model.eval()
    total = 0.0
    for start in range(0, n, 32):
        logits = model(x[start : start + 32])[0].float()  # (b, T, V)
        if bytes_only:
            logits = logits[..., :256]
        loss = F.cross_entropy(logits.flatten(0, 1), y[start : start + 32].flatten(), reduction="sum")
        total += loss.item()
    model.train(was)
    return total / (n * T) / math.log(2)


def _linear_weights(model: nn.Module, targets) -> dict[str, torch.Tensor]:
    """The weight of each block linear matching ``targets``, with any LoRA adapter's update folded in."""
    adapted = lora_layers(model)
    out = {}
    for name, module in model.named_modules():
        if name in adapted:
            layer = adapted[name]
            out[name] = layer.base.weight + (0 if layer.merged else layer.delta_weight())
        elif isinstance(module, nn.Linear) and matches(name, targets) and not name.endswith(".base"):
            out[name] = module.weight
    return {k: v.detach().float() for k, v in out.items()}


def weight_updates(base: nn.Module, tuned: nn.Module, targets=DEFAULT_TARGETS) -> dict[str, torch.Tensor]:
    """ΔW = W_tuned - W_base for every block linear named by ``targets`` (adapters folded in)."""
    before, after = _linear_weights(base, targets), _linear_weights(tuned, targets)
    if set(before) != set(after):
        raise ValueError(f"the two models have different layers: {sorted(set(before) ^ set(after))[:4]}")
    return {name: after[name] - before[name] for name in before}


def energy_rank(delta: torch.Tensor, energy: float = 0.9) -> int:
    """The smallest r whose r largest singular values hold ``energy`` of sum(sigma^2) (0 for a zero matrix)."""
    if not 0 < energy <= 1:
        raise ValueError(f"energy must be in (0, 1], got {energy}")
    s2 = torch.linalg.svdvals(delta.double()) ** 2  # (min(out, in),), descending
    total = float(s2.sum())
    if total == 0:
        return 0
    held = torch.cumsum(s2, 0) / total
    return int((held < energy - 1e-12).sum()) + 1


def update_ranks(base: nn.Module, tuned: nn.Module, energy: float = 0.9, targets=DEFAULT_TARGETS) -> dict[str, int]:
    """:func:`energy_rank` of each block linear's update, by layer name."""
    return {name: energy_rank(d, energy) for name, d in weight_updates(base, tuned, targets).items()}

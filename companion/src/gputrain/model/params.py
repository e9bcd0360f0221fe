"""Parameter counts: counted from a module, and in closed form from a :class:`GPTConfig`."""

from __future__ import annotations

import torch.nn as nn

from .. import moe
from .config import GPTConfig


def count_params(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters (shared tensors counted once: ``parameters()`` yields each tensor once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def gpt_num_params(cfg: GPTConfig, active: bool = False) -> int:
    """Closed-form parameter count of :class:`GPT` (the head counted once more when not tied).

    Per block: attention 4C^2 (qkv and proj) and MLP 8C^2 (C -> 4C -> C), so
    12C^2 weights, plus 13C biases and LayerNorm gains/shifts when ``bias``.
    An MoE block swaps the MLP (8C^2 + 5C) for :func:`gputrain.moe.moe_layer_params`;
    ``active=True`` counts only the experts one token uses (chapter 9).
    """
    V, T, L, C = cfg.vocab_size, cfg.block_size, cfg.n_layer, cfg.n_embd
    per_block = 12 * C * C + (13 * C if cfg.bias else 2 * C)  # weights + biases/LN (2 LN gains only)
    final_ln = 2 * C if cfg.bias else C
    n_moe = sum(cfg.is_moe_layer(i) for i in range(L))
    swap = 0
    if n_moe:
        moe_total, moe_active = moe.moe_layer_params(cfg.moe_config())
        swap = n_moe * ((moe_active if active else moe_total) - (8 * C * C + (5 * C if cfg.bias else 0)))
    head = 0 if getattr(cfg, "tie_embeddings", True) else V * C  # shapes without the field are tied
    return V * C + T * C + L * per_block + final_ln + swap + head

"""The transformer block: attention and a feed-forward network (dense or experts) on a residual stream."""

from __future__ import annotations

import torch
import torch.nn as nn

from .. import moe
from .attention import CausalSelfAttention
from .cache import LayerCache
from .config import GPTConfig
from .mlp import MLP


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: GPTConfig, layer: int = 0):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        # position-wise feed-forward: C -> 4C -> GELU -> C, or a mixture of experts (chapter 9)
        if cfg.is_moe_layer(layer):
            self.mlp = moe.MoE(cfg.moe_config())
        else:
            self.mlp = MLP(
                cfg.n_embd,
                cfg.n_embd,
                hidden=4 * cfg.n_embd,
                depth=2,
                activation="gelu",
                bias=cfg.bias,
                dropout=cfg.dropout,
            )

    def forward(self, x: torch.Tensor, kv: "LayerCache | None" = None) -> torch.Tensor:
        h = self.ln1(x)
        x = x + (self.attn(h) if kv is None else self.attn(h, kv))  # (B, T, C): the residual stream
        x = x + self.mlp(self.ln2(x))  # (B, T, C)
        return x

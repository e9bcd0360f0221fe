"""The hand-written attention the SDPA rung replaces: every T x T matrix written to memory."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..model import GPT, CausalSelfAttention


class HandWrittenAttention(nn.Module):
    """Causal attention written out: ``softmax(Q K^T / sqrt(d) + mask) V``, every T x T matrix in memory.

    It shares the ``qkv`` and ``proj`` layers of the :class:`CausalSelfAttention`
    it replaces (same parameter names, same weights), so the two compute the
    same function and only the kernels differ.
    """

    def __init__(self, attn: CausalSelfAttention, block_size: int):
        super().__init__()
        self.n_head, self.qkv, self.proj, self.resid_drop = attn.n_head, attn.qkv, attn.proj, attn.resid_drop
        self.dropout = attn.dropout
        mask = torch.ones(block_size, block_size, dtype=torch.bool, device=attn.qkv.weight.device).tril()
        self.register_buffer("mask", mask, persistent=False)  # (T, T): True where a query may look

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)  # 3 x (B, T, C)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, T, T): written to memory
        scores = scores.masked_fill(~self.mask[:T, :T], float("-inf"))  # no looking ahead
        weights = F.dropout(F.softmax(scores, dim=-1), self.dropout, self.training)  # (B, H, T, T) again
        y = (weights @ v).transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.resid_drop(self.proj(y))


def use_hand_written_attention(model: GPT) -> GPT:
    """Swap every block's SDPA attention for :class:`HandWrittenAttention`, in place, from outside the model."""
    for block in model.blocks:
        if isinstance(block.attn, CausalSelfAttention):
            block.attn = HandWrittenAttention(block.attn, model.cfg.block_size)
    return model

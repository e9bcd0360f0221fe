"""Causal self-attention: SDPA, or chapter 11's Triton kernel, with an optional KV cache (chapter 2)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .cache import LayerCache
from .config import GPTConfig


class CausalSelfAttention(nn.Module):
    """Multi-head attention where position t sees positions <= t, via SDPA."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = cfg.dropout
        self.attention = cfg.attention
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, kv: "LayerCache | None" = None) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)  # 3 x (B, T, C)
        # (B, T, C) -> (B, H, T, C/H): each head attends in its own subspace
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        mask, causal = None, True
        if kv is not None:  # generation: the new tokens' queries meet every key so far
            k, v = kv.store(k, v)  # (B, H, S, C/H), S = cached + T
            if T == 1:
                causal = False  # one query, the newest position: it may see every key
            elif k.size(2) > T:  # several new tokens after cached ones: query i sees keys <= S - T + i
                causal = False
                mask = torch.ones(T, k.size(2), dtype=torch.bool, device=x.device).tril(k.size(2) - T)
        # softmax(q k^T / sqrt(d)) v with a causal mask; flash kernel on GPUs
        if self.attention == "flash-triton" and causal and mask is None:  # chapter 11's kernel (square causal)
            from ..kernels import flash_attention  # imported here: the kernels sit below the model

            y = flash_attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)  # (B, H, T, C/H)
        else:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=causal, dropout_p=self.dropout if self.training else 0.0
            )  # (B, H, T, C/H)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.resid_drop(self.proj(y))

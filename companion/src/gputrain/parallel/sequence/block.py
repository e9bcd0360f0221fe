"""A transformer block on one device, and the same block split over t ranks, with or without sequence parallelism."""

from __future__ import annotations

import copy
import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from ..tensor import shard_range
from .collectives import (
    CommLog,
    _EnterTP,
    _GatherLinear,
    _LeaveTP,
    _ScatterSeq,
)


def causal_attention(qkv: torch.Tensor, head_dim: int, dropout: float, training: bool) -> torch.Tensor:
    """Causal attention of however many heads ``qkv`` (S, B, heads*3*d) holds; returns (S, B, heads*d).

    Unfused on purpose: the score matrix is formed, soft-maxed and dropped out
    in the open, so autograd saves what Korthikanti et al. count.
    """
    s, b, d = qkv.shape[0], qkv.shape[1], head_dim
    q, k, v = qkv.view(s, b, -1, 3, d).permute(3, 1, 2, 0, 4)  # 3 x (B, heads, S, d)
    scores = (q @ k.transpose(-2, -1)) * (1 / math.sqrt(d))  # (B, heads, S, S)
    mask = torch.ones(s, s, dtype=torch.bool, device=qkv.device).triu_(1)  # future positions
    att = F.dropout(scores.masked_fill(mask, float("-inf")).softmax(-1), dropout, training)
    return (att @ v).permute(2, 0, 1, 3).reshape(s, b, -1)  # (S, B, heads*d)


class DenseBlock(nn.Module):
    """A pre-LayerNorm GPT block on one device, sequence-first, with explicit (unfused) attention.

    The attention matrix is formed, soft-maxed and dropped out in the open, so
    that what autograd saves is exactly what Korthikanti et al. count.
    The q/k/v projection's rows are grouped per head ``[q_h, k_h, v_h]`` so
    that a contiguous column split hands every rank whole heads.
    """

    def __init__(self, h: int, a: int, dropout: float = 0.0):
        super().__init__()
        if h % a:
            raise ValueError(f"hidden size {h} is not a multiple of the number of heads {a}")
        self.h, self.a, self.p = h, a, dropout
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc, self.fc2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (S, B, H)
        attn = causal_attention(self.qkv(self.ln1(x)), self.h // self.a, self.p, self.training)
        x = x + F.dropout(self.proj(attn), self.p, self.training)
        return x + F.dropout(self.fc2(F.gelu(self.fc(self.ln2(x)))), self.p, self.training)


class ParallelBlock(nn.Module):
    """:class:`DenseBlock` split over all ranks: tensor parallel (``sequence=False``) or TP + sequence parallel.

    Input and output are (S, B, H) with ``sequence=False`` and this rank's
    (S/t, B, H) slice of positions with ``sequence=True``.  After the backward
    call :meth:`sync_grads`: under sequence parallelism the LayerNorm weights
    and the row-parallel biases see only this rank's positions, so their
    gradients are summed over ranks.  Explained in chapter 8b.
    """

    def __init__(self, dense: DenseBlock, sequence: bool = False):
        super().__init__()
        t, r = dist.get_world_size(), dist.get_rank()
        if dense.a % t:
            raise ValueError(
                f"{dense.a} attention heads cannot be split over a tensor-parallel degree of {t}: "
                f"pick a degree that divides {dense.a}"
            )
        self.sequence, self.t, self.log = sequence, t, CommLog()
        self.h, self.a, self.p = dense.h, dense.a, dense.p
        self.ln1, self.ln2 = copy.deepcopy(dense.ln1), copy.deepcopy(dense.ln2)  # replicated
        for name in ("qkv", "fc"):  # column parallel: my rows of W and b
            lin = getattr(dense, name)
            lo, hi = shard_range(lin.out_features, t, r, f"{name} output features")
            self.register_parameter(f"{name}_w", nn.Parameter(lin.weight.detach()[lo:hi].clone()))
            self.register_parameter(f"{name}_b", nn.Parameter(lin.bias.detach()[lo:hi].clone()))
        for name in ("proj", "fc2"):  # row parallel: my columns of W, the whole bias
            lin = getattr(dense, name)
            lo, hi = shard_range(lin.in_features, t, r, f"{name} input features")
            self.register_parameter(f"{name}_w", nn.Parameter(lin.weight.detach()[:, lo:hi].clone()))
            self.register_parameter(f"{name}_b", nn.Parameter(lin.bias.detach().clone()))

    def _column(self, x: torch.Tensor, name: str) -> torch.Tensor:
        w, b = getattr(self, f"{name}_w"), getattr(self, f"{name}_b")
        if self.sequence:
            return _GatherLinear.apply(x, w, b, self.log)  # (S/t, B, H) -> (S, B, out/t)
        return F.linear(_EnterTP.apply(x, self.log), w, b)  # (S, B, H) -> (S, B, out/t)

    def _row(self, x: torch.Tensor, name: str) -> torch.Tensor:
        partial = F.linear(x, getattr(self, f"{name}_w"))  # (S, B, H): my share of the sum
        out = _ScatterSeq.apply(partial, self.log) if self.sequence else _LeaveTP.apply(partial, self.log)
        return out + getattr(self, f"{name}_b")  # bias once, after the sum

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (S, B, H), or (S/t, B, H) with sequence=True
        heads = causal_attention(self._column(self.ln1(x), "qkv"), self.h // self.a, self.p, self.training)
        attn = self._row(heads, "proj")  # (S, B, H) or (S/t, B, H): the a/t heads' share, summed
        x = x + F.dropout(attn, self.p, self.training)
        mlp = self._row(F.gelu(self._column(self.ln2(x), "fc")), "fc2")
        return x + F.dropout(mlp, self.p, self.training)

    def sync_grads(self) -> None:
        """Sum the gradients of replicated parameters that only saw this rank's positions (SP only)."""
        if not self.sequence:
            return
        for p in (*self.ln1.parameters(), *self.ln2.parameters(), self.proj_b, self.fc2_b):
            dist.all_reduce(p.grad)
            self.log.add("all-reduce (parameters)", 0, self.t)  # parameter-sized; not activation traffic

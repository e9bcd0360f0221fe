"""The experts and the dispatch around them: capacity, and each expert on its slice of tokens."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


class Expert(nn.Module):
    """One feed-forward expert, the same shape as a GPT block's MLP: C -> hidden -> GELU -> C."""

    def __init__(self, dim: int, hidden: int, bias: bool = True):
        super().__init__()
        self.fc = nn.Linear(dim, hidden, bias=bias)
        self.proj = nn.Linear(hidden, dim, bias=bias)  # named proj: GPT scales its init like other proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))  # (n, C)


def apply_capacity(experts: torch.Tensor, n_experts: int, capacity: Optional[int]) -> torch.Tensor:
    """(N, k) bool mask of assignments kept when each expert accepts at most ``capacity``.

    Assignments are served in token order (token 0 first), the usual priority
    in Switch/GShard; ``capacity=None`` keeps everything (dropless).
    """
    flat = experts.reshape(-1)  # (N*k,) expert of each assignment, token-major
    if capacity is None:
        return torch.ones_like(experts, dtype=torch.bool)
    order = torch.argsort(flat, stable=True)  # assignments grouped by expert, token order inside
    counts = torch.bincount(flat, minlength=n_experts)  # (E,)
    starts = torch.cumsum(counts, 0) - counts  # (E,) first slot of each expert in `order`
    rank_in_expert = torch.empty_like(flat)
    rank_in_expert[order] = torch.arange(len(flat), device=flat.device) - starts[flat[order]]
    return (rank_in_expert < capacity).view_as(experts)  # (N, k)


def run_experts(experts: nn.ModuleList | list, x_sorted: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """Each expert on its contiguous slice of ``x_sorted`` (rows grouped by expert); empty slices skipped.

    An expert that receives no token is never called, so its weights get no
    gradient (``grad`` stays None) rather than a zero computed at a cost.
    """
    outs = []
    for expert, chunk in zip(experts, x_sorted.split(counts)):
        outs.append(expert(chunk) if len(chunk) else chunk)  # (n_e, C)
    return torch.cat(outs) if outs else x_sorted

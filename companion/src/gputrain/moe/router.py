"""The router: scores, top-k choice, node-limited groups, and the auxiliary loss on its scores."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import MoEConfig


@dataclass
class Routing:
    """What the router decided for N tokens (chapter 9)."""

    experts: torch.Tensor  # (N, k) chosen expert ids
    gates: torch.Tensor  # (N, k) weights of the chosen experts' outputs (differentiable)
    probs: torch.Tensor  # (N, E) normalized scores over all experts, for the aux loss
    keep: torch.Tensor  # (N, k) bool: False where the assignment was dropped for capacity


class Router(nn.Module):
    """Scores tokens against experts and picks the top k (chapter 9).

    ``self.e_bias`` is the aux-loss-free balancing bias: it shifts which experts
    are *chosen* but never the gate values.
    """

    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.cfg = cfg
        self.weight = nn.Parameter(torch.empty(cfg.n_experts, cfg.dim))
        nn.init.normal_(self.weight, std=0.02)
        self.register_buffer("e_bias", torch.zeros(cfg.n_experts))

    def forward(self, x: torch.Tensor) -> Routing:
        cfg = self.cfg
        logits = x @ self.weight.t()  # (N, E)
        if cfg.router == "softmax":
            wide = torch.promote_types(logits.dtype, torch.float32)  # bf16 logits: softmax in fp32
            scores = F.softmax(logits, dim=-1, dtype=wide).to(x.dtype)  # (N, E), rows sum to 1
            probs = scores
        else:
            scores = torch.sigmoid(logits)  # (N, E) independent affinities
            probs = scores / scores.sum(-1, keepdim=True)  # (N, E), for the aux loss
        choice = scores.detach() + self.e_bias.to(scores.dtype)  # the bias only steers the choice
        if cfg.n_groups > 1:
            choice = self._limit_groups(choice)
        experts = choice.topk(cfg.top_k, dim=-1).indices  # (N, k)
        gates = scores.gather(-1, experts)  # (N, k): the unbiased scores
        if cfg.router == "sigmoid":
            gates = gates / gates.sum(-1, keepdim=True) * cfg.routed_scaling
        keep = torch.ones_like(experts, dtype=torch.bool)
        return Routing(experts, gates, probs, keep)

    def _limit_groups(self, choice: torch.Tensor) -> torch.Tensor:
        """Mask all experts outside each token's best ``topk_groups`` groups (DeepSeek-V3's node limit)."""
        cfg = self.cfg
        N = choice.shape[0]
        grouped = choice.view(N, cfg.n_groups, -1)  # (N, G, E/G)
        per_group = max(1, cfg.top_k // cfg.topk_groups)
        group_score = grouped.topk(per_group, dim=-1).values.sum(-1)  # (N, G)
        best = group_score.topk(cfg.topk_groups, dim=-1).indices  # (N, M)
        allowed = torch.zeros_like(group_score, dtype=torch.bool).scatter_(1, best, True)  # (N, G)
        return grouped.masked_fill(~allowed[:, :, None], float("-inf")).view(N, -1)  # (N, E)


def balance_loss(probs: torch.Tensor, experts: torch.Tensor, n_experts: int, weight: float) -> torch.Tensor:
    """Switch Transformer's auxiliary loss ``weight * E * sum_i f_i * P_i`` (chapter 9).

    ``f_i`` is the fraction of the N*k assignments that chose expert i (not
    differentiable), ``P_i`` the mean router probability of expert i over the
    tokens (differentiable).  It equals ``weight`` when both are uniform.
    An empty batch has no load to balance: the loss is 0 (not 0/0), still
    attached to ``probs`` so that backward runs.
    """
    if experts.numel() == 0:
        return probs.sum() * 0.0  # () zero with a graph; f and P would both be 0/0
    f = torch.bincount(experts.reshape(-1), minlength=n_experts).to(probs.dtype) / experts.numel()  # (E,)
    P = probs.mean(0)  # (E,)
    return weight * n_experts * (f * P).sum()

"""The DeepSeekMoE layer: shared experts plus top-k routed experts, and its balancing bias (chapter 9)."""

from __future__ import annotations

import torch
import torch.nn as nn

from .config import MoEConfig
from .experts import Expert, apply_capacity, run_experts
from .router import Router, Routing, balance_loss


class MoE(nn.Module):
    """DeepSeekMoE feed-forward layer: shared experts + top-k routed experts (chapter 9).

    ``forward(x)`` takes (..., C) and returns the same shape.  After each call:
    ``aux_loss`` (a scalar tensor, zero unless ``balance="aux"``),
    ``last_counts`` (E,) assignments per expert before capacity,
    ``last_dropped`` (int) assignments dropped for capacity.
    """

    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.cfg = cfg
        self.router = Router(cfg)
        self.experts = nn.ModuleList(Expert(cfg.dim, cfg.expert_hidden, cfg.bias) for _ in range(cfg.n_experts))
        self.shared = nn.ModuleList(Expert(cfg.dim, cfg.expert_hidden, cfg.bias) for _ in range(cfg.n_shared))
        self.register_buffer("load_since_update", torch.zeros(cfg.n_experts))
        self.last_counts = torch.zeros(cfg.n_experts, dtype=torch.long)
        self.last_dropped = 0
        self.aux_loss = torch.zeros(())

    def route(self, x: torch.Tensor) -> Routing:
        """Route (N, C) tokens; apply capacity; record loads and the aux loss."""
        cfg = self.cfg
        r = self.router(x)
        r.keep = apply_capacity(r.experts, cfg.n_experts, cfg.capacity(len(x)))
        counts = torch.bincount(r.experts.reshape(-1), minlength=cfg.n_experts)  # (E,)
        self.last_counts = counts.detach().cpu()
        self.last_dropped = int((~r.keep).sum())
        if self.training:
            self.load_since_update += counts.to(self.load_since_update.dtype)
        self.aux_loss = (
            balance_loss(r.probs, r.experts, cfg.n_experts, cfg.aux_loss_weight)
            if cfg.balance == "aux" and self.training
            else x.new_zeros(())
        )
        return r

    def shared_out(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)  # (N, C)
        for expert in self.shared:
            out = out + expert(x)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])  # (N, C)
        r = self.route(x)
        flat_e = r.experts.reshape(-1)[r.keep.reshape(-1)]  # (A,) kept assignments, token-major
        token = torch.arange(len(x), device=x.device).repeat_interleave(self.cfg.top_k)[r.keep.reshape(-1)]
        gate = r.gates.reshape(-1)[r.keep.reshape(-1)]  # (A,)
        order = torch.argsort(flat_e, stable=True)  # group assignments by expert
        counts = torch.bincount(flat_e, minlength=self.cfg.n_experts).tolist()
        y = run_experts(self.experts, x[token[order]], counts)  # (A, C)
        y = y * gate[order, None].to(y.dtype)
        out = self.shared_out(x).index_add(0, token[order], y)  # (N, C): sum over each token's experts
        return out.view(shape)

    @torch.no_grad()
    def update_bias(self) -> None:
        """Aux-loss-free balancing: bias += gamma * sign(mean load - load) since the last update."""
        if self.cfg.balance == "bias" and self.load_since_update.sum() > 0:
            load = self.load_since_update
            self.router.e_bias += self.cfg.bias_gamma * torch.sign(load.mean() - load)
        self.load_since_update.zero_()

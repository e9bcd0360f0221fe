"""Mixture of experts in the DeepSeekMoE form: router, experts, load balancing (chapter 9).

A :class:`MoE` layer replaces a transformer block's feed-forward network with
many small *routed* experts, of which each token uses ``top_k``, plus
``n_shared`` *shared* experts that every token uses.  The router scores each
token against every routed expert in one of two ways:

* ``"softmax"`` (Switch Transformer, GShard): probabilities over all experts,
  the top k kept with their probabilities as gates (not renormalized);
* ``"sigmoid"`` (DeepSeek-V3): an independent affinity in (0, 1) per expert,
  the top k renormalized to sum to 1, times ``routed_scaling``.

Optional node-limited routing (DeepSeek-V3) splits the experts into
``n_groups`` groups (standing for nodes) and lets each token use experts of at
most ``topk_groups`` groups, chosen by the sum of each group's highest
``top_k // topk_groups`` affinities.

Load balancing is ``"none"``, ``"aux"`` (the Switch auxiliary loss
``alpha * E * sum_i f_i P_i``, left in ``layer.aux_loss`` for the model to add)
or ``"bias"`` (DeepSeek-V3's auxiliary-loss-free balancing: a per-expert bias,
a buffer, added to the scores only to *choose* experts; the training loop
calls :func:`update_router_biases` after each optimizer step to move it by
``+gamma`` for under-loaded and ``-gamma`` for over-loaded experts).

``capacity_factor=None`` is dropless; a positive number caps each expert at
``ceil(capacity_factor * tokens * top_k / n_experts)`` assignments per forward,
and the assignments past the cap (in token order) are dropped and counted.

This module imports nothing from the rest of :mod:`gputrain`;
:mod:`gputrain.model` builds its MoE blocks from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed
import torch.nn as nn
import torch.nn.functional as F

ROUTERS = ("softmax", "sigmoid")
BALANCES = ("none", "aux", "bias")


@dataclass(kw_only=True)
class MoEConfig:
    """Shape and behaviour of one :class:`MoE` layer (chapter 9)."""

    dim: int  # width C of the tokens that come in and go out
    n_experts: int  # routed experts E
    top_k: int = 2  # routed experts per token
    expert_hidden: int = 64  # hidden width of each (fine-grained) expert: C -> hidden -> C
    n_shared: int = 0  # shared experts every token passes through (same width as a routed one)
    router: str = "sigmoid"  # "sigmoid" (DeepSeek-V3) or "softmax" (Switch/GShard)
    routed_scaling: float = 1.0  # sigmoid router: gates times this after normalization (V3 uses 2.5)
    capacity_factor: Optional[float] = None  # None: dropless; else cap = ceil(cf * N * k / E) per expert
    balance: str = "none"  # "none", "aux" (auxiliary loss) or "bias" (aux-loss-free bias)
    aux_loss_weight: float = 0.01  # alpha of the auxiliary balance loss
    bias_gamma: float = 1e-3  # bias update speed of the aux-loss-free method
    n_groups: int = 1  # expert groups ("nodes") for node-limited routing; 1: no limit
    topk_groups: int = 1  # groups a token may use (M); only used when n_groups > 1
    bias: bool = True  # biases in the experts' Linear layers (as model.MLP)

    def __post_init__(self) -> None:
        for name in ("dim", "n_experts", "top_k", "expert_hidden"):
            if getattr(self, name) < 1:
                raise ValueError(f"MoEConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k={self.top_k} is larger than n_experts={self.n_experts}; pick top_k <= n_experts")
        if self.n_shared < 0:
            raise ValueError(f"n_shared must be >= 0, got {self.n_shared}")
        if self.router not in ROUTERS:
            raise ValueError(f"unknown router {self.router!r}; use one of: {', '.join(ROUTERS)}")
        if self.balance not in BALANCES:
            raise ValueError(f"unknown balance {self.balance!r}; use one of: {', '.join(BALANCES)}")
        if self.capacity_factor is not None and not self.capacity_factor > 0:
            raise ValueError(f"capacity_factor must be > 0 (or None for dropless), got {self.capacity_factor}")
        self._check_groups()

    def _check_groups(self) -> None:
        G, M = self.n_groups, self.topk_groups
        if G < 1 or self.n_experts % G:
            raise ValueError(f"n_groups={G} must be >= 1 and divide n_experts={self.n_experts}")
        if G > 1 and not 1 <= M <= G:
            raise ValueError(f"topk_groups={M} must be between 1 and n_groups={G}")
        if G > 1 and self.top_k > M * (self.n_experts // G):
            raise ValueError(
                f"top_k={self.top_k} experts do not fit in topk_groups={M} groups of "
                f"{self.n_experts // G}; raise topk_groups or lower top_k"
            )

    def capacity(self, n_tokens: int) -> Optional[int]:
        """Assignments one expert accepts per forward of ``n_tokens`` tokens; None when dropless."""
        if self.capacity_factor is None:
            return None
        return math.ceil(self.capacity_factor * n_tokens * self.top_k / self.n_experts)


class Expert(nn.Module):
    """One feed-forward expert, the same shape as a GPT block's MLP: C -> hidden -> GELU -> C."""

    def __init__(self, dim: int, hidden: int, bias: bool = True):
        super().__init__()
        self.fc = nn.Linear(dim, hidden, bias=bias)
        self.proj = nn.Linear(hidden, dim, bias=bias)  # named proj: GPT scales its init like other proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))  # (n, C)


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


def update_router_biases(model: nn.Module, group=None) -> int:
    """Call after every optimizer step: update each MoE layer's balancing bias; returns layers updated.

    Under ``torch.distributed`` the loads are first summed over ``group`` (the
    default group when None), so every rank judges the global batch and all
    replicas of a router keep the same bias.
    """
    layers = [m for m in model.modules() if isinstance(m, MoE)]
    if layers and torch.distributed.is_available() and torch.distributed.is_initialized():
        loads = torch.stack([m.load_since_update for m in layers])  # (layers, E)
        torch.distributed.all_reduce(loads, group=group)
        for m, load in zip(layers, loads):
            m.load_since_update.copy_(load)
    for m in layers:
        m.update_bias()
    return len(layers)


def aux_loss(model: nn.Module) -> torch.Tensor | float:
    """Sum of the auxiliary balance losses of the model's MoE layers from the last forward."""
    return sum((m.aux_loss for m in model.modules() if isinstance(m, MoE)), 0.0)


def expert_loads(model: nn.Module) -> torch.Tensor:
    """(layers, E) assignments per expert in each MoE layer's last forward."""
    return torch.stack([m.last_counts for m in model.modules() if isinstance(m, MoE)])


# --- parameters: total vs active per token (chapter 9) ----------------------


def count_moe_params(model: nn.Module) -> tuple[int, int]:
    """(total, active per token) counted from the modules of ``model``.

    Active = every parameter except the routed experts a token does not use:
    in each MoE layer only ``top_k`` of the ``n_experts`` routed experts run.
    """
    total = sum(p.numel() for p in model.parameters())
    idle = 0
    for m in model.modules():
        if isinstance(m, MoE):
            routed = sum(p.numel() for p in m.experts.parameters())
            idle += routed - routed * m.cfg.top_k // m.cfg.n_experts
    return total, total - idle


def moe_layer_params(cfg: MoEConfig) -> tuple[int, int]:
    """Closed-form (total, active) parameters of one :class:`MoE` layer.

    Router ``E*C``; each expert ``2*C*h`` weights plus ``h + C`` biases when
    ``bias``; ``E + S`` experts in total, ``k + S`` of them active.
    """
    C, h = cfg.dim, cfg.expert_hidden
    expert = 2 * C * h + ((h + C) if cfg.bias else 0)
    router = cfg.n_experts * C
    return (router + (cfg.n_experts + cfg.n_shared) * expert, router + (cfg.top_k + cfg.n_shared) * expert)


# DeepSeek-V3's published configuration (config.json of deepseek-ai/DeepSeek-V3; report arXiv 2412.19437)
DEEPSEEK_V3 = dict(
    n_layers=61,
    first_dense=3,
    hidden=7168,
    n_heads=128,
    q_lora_rank=1536,
    kv_lora_rank=512,
    qk_nope_head_dim=128,
    qk_rope_head_dim=64,
    v_head_dim=128,
    dense_ffn=18432,
    expert_ffn=2048,
    n_routed=256,
    n_shared=1,
    top_k=8,
    vocab=129280,
    mtp_modules=1,
)


def deepseek_v3_params(c: dict = DEEPSEEK_V3) -> dict[str, int]:
    """DeepSeek-V3's parameter counts from its published configuration (chapter 9).

    Counted: MLA attention (the q down/up projections with the q-LoRA RMSNorm,
    the joint kv down-projection with the decoupled RoPE key, its RMSNorm, the kv
    up-projection, the output projection), two RMSNorms per layer, SwiGLU FFNs
    (three matrices: gate, up, down; no biases), the router's weights and its
    per-expert score-correction bias, the input embedding and the untied output
    head, the final norm.

    * ``total`` (~671 B): the main model, 61 layers (3 dense, 58 MoE).
    * ``active`` (~37 B; 36.6 B in DeepSeek's own breakdown): per token, with
      8 routed + 1 shared experts per MoE layer and the output head, but not
      the embedding table (a lookup reads one row and does no arithmetic).
    * ``mtp`` (~11.6 B): the multi-token-prediction module's own parameters
      (two RMSNorms, a 2h -> h projection, one MoE layer, a norm; it shares the
      embedding and the head with the main model).
    * ``with_mtp_stored`` (~685 B): the size of the published checkpoint, which
      stores the MTP module with its own copies of the embedding and the head.
    """
    h, H = c["hidden"], c["n_heads"]
    attn = (
        h * c["q_lora_rank"]
        + c["q_lora_rank"]
        + c["q_lora_rank"] * H * (c["qk_nope_head_dim"] + c["qk_rope_head_dim"])
        + h * (c["kv_lora_rank"] + c["qk_rope_head_dim"])
        + c["kv_lora_rank"]
        + c["kv_lora_rank"] * H * (c["qk_nope_head_dim"] + c["v_head_dim"])
        + H * c["v_head_dim"] * h
    )
    swiglu = 3 * h * c["expert_ffn"]
    router = h * c["n_routed"] + c["n_routed"]
    dense = attn + 2 * h + 3 * h * c["dense_ffn"]
    moe_total = attn + 2 * h + router + (c["n_routed"] + c["n_shared"]) * swiglu
    moe_active = attn + 2 * h + router + (c["top_k"] + c["n_shared"]) * swiglu
    n_moe = c["n_layers"] - c["first_dense"]
    emb = c["vocab"] * h
    total = 2 * emb + h + c["first_dense"] * dense + n_moe * moe_total
    active = emb + h + c["first_dense"] * dense + n_moe * moe_active  # head, not the embedding lookup
    mtp = c["mtp_modules"] * (2 * h + 2 * h * h + moe_total + h)
    return {"total": total, "active": active, "mtp": mtp, "with_mtp_stored": total + mtp + 2 * emb * c["mtp_modules"]}

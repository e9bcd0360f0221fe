"""What an MoE layer is: :class:`MoEConfig`, its routers and its balancing methods (chapter 9)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

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

"""The expert-parallel MoE layer: each rank holds E / P routed experts and trades tokens by all-to-all."""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist
import torch.nn as nn

from ...moe import MoE, MoEConfig, run_experts
from .exchange import A2ATraffic, all_to_all


def check_expert_split(n_experts: int, ranks: int) -> int:
    """Experts per rank; a clear error when the experts do not split evenly."""
    if ranks < 1 or n_experts % ranks:
        raise ValueError(
            f"{n_experts} experts do not split evenly over {ranks} expert-parallel ranks; "
            f"use a number of ranks that divides {n_experts}"
        )
    return n_experts // ranks


def expert_parallel_group(ep_size: int):
    """This rank's expert-parallel group: consecutive ranks in groups of ``ep_size`` (call on every rank)."""
    world = dist.get_world_size()
    if ep_size < 1 or world % ep_size:
        raise ValueError(
            f"expert-parallel size {ep_size} does not divide the world size {world}; pick a divisor of {world}"
        )
    mine = None
    for start in range(0, world, ep_size):
        g = dist.new_group(list(range(start, start + ep_size)))  # every rank creates every group
        if start <= dist.get_rank() < start + ep_size:
            mine = g
    return mine


class ExpertParallelMoE(MoE):
    """A :class:`gputrain.moe.MoE` whose routed experts are split over an expert-parallel group (chapter 9)."""

    def __init__(self, cfg: MoEConfig, group=None, traffic: Optional[A2ATraffic] = None):
        super().__init__(cfg)
        self.group = group
        self.ranks, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.local = check_expert_split(cfg.n_experts, self.ranks)
        first = self.rank * self.local
        self.experts = nn.ModuleList(list(self.experts)[first : first + self.local])  # only my experts
        self.traffic = traffic if traffic is not None else A2ATraffic()
        self.last_send_splits: list[int] = []

    @classmethod
    def from_dense(cls, dense: MoE, group=None, traffic: Optional[A2ATraffic] = None) -> "ExpertParallelMoE":
        """This rank's share of a one-process layer: same router and shared experts, E/P routed experts."""
        ep = cls(dense.cfg, group, traffic)
        ep.to(dense.router.weight.dtype)
        ep.router.load_state_dict(dense.router.state_dict())
        ep.shared.load_state_dict(dense.shared.state_dict())
        first = ep.rank * ep.local
        for mine, theirs in zip(ep.experts, list(dense.experts)[first : first + ep.local]):
            mine.load_state_dict(theirs.state_dict())
        return ep

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])  # (N, C)
        r = self.route(x)
        kept = r.keep.reshape(-1)
        flat_e = r.experts.reshape(-1)[kept]  # (A,)
        token = torch.arange(len(x), device=x.device).repeat_interleave(self.cfg.top_k)[kept]  # (A,)
        order = torch.argsort(flat_e, stable=True)  # by expert, hence by owning rank
        counts = torch.bincount(flat_e, minlength=self.cfg.n_experts)  # (E,)
        recv = self._exchange_counts(counts)  # (P, E/P): rows from each source for each local expert
        send_splits = counts.view(self.ranks, self.local).sum(1).tolist()
        recv_splits = recv.sum(1).tolist()
        self.last_send_splits = send_splits
        x_in = all_to_all(x[token[order]], recv_splits, send_splits, self.group, self.traffic, "dispatch")
        # arrived grouped by source rank, then expert: regroup by local expert for the matmuls
        local_e = torch.arange(self.local, device=x.device).repeat(self.ranks).repeat_interleave(recv.reshape(-1))
        perm = torch.argsort(local_e, stable=True)
        y = run_experts(self.experts, x_in[perm], recv.sum(0).tolist())  # (R, C)
        y = y[torch.argsort(perm)]  # back to arrival order
        y = all_to_all(y, send_splits, recv_splits, self.group, self.traffic, "combine")  # (A, C)
        y = y * r.gates.reshape(-1)[kept][order, None].to(y.dtype)
        return self.shared_out(x).index_add(0, token[order], y).view(shape)

    def _exchange_counts(self, counts: torch.Tensor) -> torch.Tensor:
        recv = torch.empty_like(counts)
        dist.all_to_all_single(recv, counts, group=self.group)  # equal splits: E/P counts per peer
        return recv.view(self.ranks, self.local)

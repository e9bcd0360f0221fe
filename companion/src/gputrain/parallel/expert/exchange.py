"""The all-to-all exchange with its backward, the bytes it sends, and what crosses the network between nodes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.distributed as dist


@dataclass
class A2ATraffic:
    """Bytes this rank sent to *other* ranks, per phase ("dispatch", "combine", and their "_grad")."""

    sent: dict[str, int] = field(default_factory=dict)
    calls: int = 0

    def add(self, phase: str, nbytes: int) -> None:
        self.sent[phase] = self.sent.get(phase, 0) + nbytes
        self.calls += 1


class _AllToAll(torch.autograd.Function):
    """``all_to_all_single`` with uneven splits; backward sends the gradients back the way they came."""

    @staticmethod
    def forward(ctx, x, out_splits, in_splits, group, traffic, phase):
        ctx.splits, ctx.group, ctx.traffic, ctx.phase = (out_splits, in_splits), group, traffic, phase
        return _exchange(x, out_splits, in_splits, group, traffic, phase)

    @staticmethod
    def backward(ctx, grad):
        out_splits, in_splits = ctx.splits
        g = _exchange(grad, in_splits, out_splits, ctx.group, ctx.traffic, ctx.phase + "_grad")
        return g, None, None, None, None, None


def _exchange(x, out_splits, in_splits, group, traffic, phase):
    x = x.contiguous()  # (sum(in_splits), C)
    out = x.new_empty((sum(out_splits),) + tuple(x.shape[1:]))  # (sum(out_splits), C)
    dist.all_to_all_single(out, x, out_splits, in_splits, group=group)
    if traffic is not None:
        me = dist.get_rank(group)
        row = math.prod(x.shape[1:]) * x.element_size()  # from the shape: x may have no rows at all
        traffic.add(phase, (sum(in_splits) - in_splits[me]) * row)  # what left this rank
    return out


def all_to_all(
    x: torch.Tensor,
    out_splits: list[int],
    in_splits: list[int],
    group=None,
    traffic: Optional[A2ATraffic] = None,
    phase: str = "dispatch",
) -> torch.Tensor:
    """Differentiable all-to-all: rows ``in_splits[j]`` of ``x`` go to rank j; ``out_splits[j]`` arrive from j."""
    return _AllToAll.apply(x, list(out_splits), list(in_splits), group, traffic, phase)


def node_traffic_bytes(experts: torch.Tensor, source_node: int, experts_per_node: int, row_bytes: int) -> int:
    """Bytes that leave ``source_node`` when each token is sent once to every other node it uses.

    DeepSeek-V3 dispatches a token over InfiniBand once per destination node and
    fans it out to that node's GPUs over NVLink, so what crosses the network is
    the number of distinct (token, other node) pairs times a token's bytes.
    """
    nodes = experts // experts_per_node  # (N, k)
    pairs = torch.zeros(len(experts), int(nodes.max()) + 1, dtype=torch.bool).scatter_(1, nodes, True)
    if source_node < pairs.shape[1]:
        pairs[:, source_node] = False
    return int(pairs.sum()) * row_bytes

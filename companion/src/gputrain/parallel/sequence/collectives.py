"""The collectives of a tensor-parallel block, each an autograd function, and the log of the bytes they send."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F


@dataclass
class CommLog:
    """Collectives one rank took part in, and the bytes it sent (ring algorithms, per rank)."""

    calls: dict[str, int] = field(default_factory=dict)  # kind -> count
    sent_bytes: float = 0.0

    def add(self, kind: str, full_bytes: int, t: int) -> None:
        """``full_bytes``: the size of the whole (unsharded) tensor the collective produces or consumes."""
        self.calls[kind] = self.calls.get(kind, 0) + 1
        share = (t - 1) / t * full_bytes  # reduce-scatter and all-gather; an all-reduce is both
        self.sent_bytes += 2 * share if kind == "all-reduce" else share


def _all_reduce(x: torch.Tensor, log: CommLog) -> torch.Tensor:
    x = x.contiguous().clone()
    dist.all_reduce(x)
    log.add("all-reduce", x.numel() * x.element_size(), dist.get_world_size())
    return x


def _all_gather(x: torch.Tensor, log: CommLog) -> torch.Tensor:
    t = dist.get_world_size()
    out = x.new_empty((x.shape[0] * t, *x.shape[1:]))  # (S, ...) from t shards of (S/t, ...)
    dist.all_gather_into_tensor(out, x.contiguous())
    log.add("all-gather", out.numel() * out.element_size(), t)
    return out


def _reduce_scatter(x: torch.Tensor, log: CommLog) -> torch.Tensor:
    t = dist.get_world_size()
    out = x.new_empty((x.shape[0] // t, *x.shape[1:]))  # (S/t, ...): my positions, summed over ranks
    dist.reduce_scatter_tensor(out, x.contiguous())
    log.add("reduce-scatter", x.numel() * x.element_size(), t)
    return out


class _EnterTP(torch.autograd.Function):
    """Megatron's f: identity forward, all-reduce of the input gradient backward."""

    @staticmethod
    def forward(ctx, x, log):
        ctx.log = log
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad, ctx.log), None


class _LeaveTP(torch.autograd.Function):
    """Megatron's g: all-reduce forward (sum the row-parallel partials), identity backward."""

    @staticmethod
    def forward(ctx, x, log):
        return _all_reduce(x, log)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _GatherLinear(torch.autograd.Function):
    """All-gather the sequence shard, then a column-parallel linear; saves only the shard (re-gathers backward)."""

    @staticmethod
    def forward(ctx, shard, weight, bias, log):
        ctx.save_for_backward(shard, weight)
        ctx.log, ctx.has_bias = log, bias is not None
        return F.linear(_all_gather(shard, log), weight, bias)  # (S, B, out/t)

    @staticmethod
    def backward(ctx, grad):  # grad: (S, B, out/t)
        shard, weight = ctx.saved_tensors
        full = _all_gather(shard, ctx.log)  # (S, B, in): gathered again instead of kept
        grad_w = grad.flatten(0, 1).T @ full.flatten(0, 1)  # (out/t, in)
        grad_b = grad.sum((0, 1)) if ctx.has_bias else None
        grad_in = _reduce_scatter(grad @ weight, ctx.log)  # (S/t, B, in): partial sums -> my positions
        return grad_in, grad_w, grad_b, None


class _ScatterSeq(torch.autograd.Function):
    """Reduce-scatter along the sequence forward (after a row-parallel linear); all-gather backward."""

    @staticmethod
    def forward(ctx, x, log):
        ctx.log = log
        return _reduce_scatter(x, log)

    @staticmethod
    def backward(ctx, grad):
        return _all_gather(grad, ctx.log), None

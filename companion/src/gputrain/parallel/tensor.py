"""Tensor parallelism from scratch: Megatron's column and row parallel linear layers (chapter 8).

One matrix product ``Y = X W^T`` can be split across T ranks two ways.

* **Column parallel**: each rank keeps a slice of W's *output* rows and
  computes a slice of Y's columns.  Every rank needs all of X.
* **Row parallel**: each rank keeps a slice of W's *input* columns, reads the
  matching slice of X, and produces a partial Y; the partials are summed
  (all-reduce).

Megatron-LM (Shoeybi et al. 2019) chains the two in a transformer MLP:
column-parallel ``fc`` (its output slice feeds GELU, which works element-wise,
so no communication is needed in between), then row-parallel ``proj``.  The
only communication is one all-reduce in the forward pass (after ``proj``)
and one in the backward pass (the gradient of the MLP's input).  The two
autograd functions below are the paper's ``g`` and ``f``: each is the
identity in one direction and an all-reduce in the other.

The communication is activation-sized (B x T x C per all-reduce) and happens
in every layer, twice per step per micro-batch: that is why tensor
parallelism lives inside one node, on NVLink.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from ..model import Block, GPTConfig
from .launch import rank_device
from .ring import Traffic


def shard_range(size: int, degree: int, rank: int, what: str = "dimension") -> tuple[int, int]:
    """The ``[start, end)`` slice of a dimension of ``size`` that ``rank`` holds, split ``degree`` ways."""
    if degree < 1:
        raise ValueError(f"tensor-parallel degree must be >= 1, got {degree}")
    if size % degree:
        raise ValueError(
            f"tensor-parallel degree {degree} does not divide the {what} {size}; pick a degree that divides {size}"
        )
    if not 0 <= rank < degree:
        raise ValueError(f"rank {rank} is outside a tensor-parallel group of {degree}")
    step = size // degree
    return rank * step, (rank + 1) * step


class _CopyToParallel(torch.autograd.Function):
    """Megatron's ``f``: identity forward; all-reduce of the input gradient backward."""

    @staticmethod
    def forward(ctx, x, group, traffic):
        ctx.group, ctx.traffic = group, traffic
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)  # each rank holds a partial dL/dx: sum them
        ctx.traffic.messages += 1
        ctx.traffic.sent_bytes += grad.numel() * grad.element_size()
        return grad, None, None


class _ReduceFromParallel(torch.autograd.Function):
    """Megatron's ``g``: all-reduce forward (sum the partial outputs); identity backward."""

    @staticmethod
    def forward(ctx, x, group, traffic):
        x = x.contiguous().clone()
        dist.all_reduce(x, group=group)
        traffic.messages += 1
        traffic.sent_bytes += x.numel() * x.element_size()
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None  # every rank already has the full output gradient


class ColumnParallelLinear(nn.Module):
    """``Linear(in, out)`` whose ``out`` features are split across the group: W is (out/T, in).

    The input must be the same on every rank; the output is this rank's
    ``out/T`` slice (feed it to a :class:`RowParallelLinear`).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        group: Optional[dist.ProcessGroup] = None,
        traffic: Optional[Traffic] = None,
    ):
        super().__init__()
        self.group = group
        self.degree, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.start, self.end = shard_range(out_features, self.degree, self.rank, "output features")
        self.weight = nn.Parameter(torch.empty(self.end - self.start, in_features, device=rank_device()))
        self.bias = nn.Parameter(torch.zeros(self.end - self.start, device=rank_device())) if bias else None
        self.traffic = traffic if traffic is not None else Traffic()
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))

    @torch.no_grad()
    def load_dense(self, dense: nn.Linear) -> "ColumnParallelLinear":
        """Copy this rank's rows of a full ``nn.Linear``."""
        self.weight.copy_(dense.weight[self.start : self.end])
        if self.bias is not None:
            self.bias.copy_(dense.bias[self.start : self.end])
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _CopyToParallel.apply(x, self.group, self.traffic)  # (B, T, in), same on all ranks
        return F.linear(x, self.weight, self.bias)  # (B, T, out/T): this rank's columns of Y


class RowParallelLinear(nn.Module):
    """``Linear(in, out)`` whose ``in`` features are split across the group: W is (out, in/T).

    The input is this rank's ``in/T`` slice (from a :class:`ColumnParallelLinear`);
    the partial products are summed with one all-reduce, then the (replicated) bias is added.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        group: Optional[dist.ProcessGroup] = None,
        traffic: Optional[Traffic] = None,
    ):
        super().__init__()
        self.group = group
        self.degree, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.start, self.end = shard_range(in_features, self.degree, self.rank, "input features")
        self.weight = nn.Parameter(torch.empty(out_features, self.end - self.start, device=rank_device()))
        self.bias = nn.Parameter(torch.zeros(out_features, device=rank_device())) if bias else None
        self.traffic = traffic if traffic is not None else Traffic()
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))

    @torch.no_grad()
    def load_dense(self, dense: nn.Linear) -> "RowParallelLinear":
        """Copy this rank's columns of a full ``nn.Linear`` (and its whole bias)."""
        self.weight.copy_(dense.weight[:, self.start : self.end])
        if self.bias is not None:
            self.bias.copy_(dense.bias)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        partial = F.linear(x, self.weight)  # (B, T, out): this rank's share of the sum
        y = _ReduceFromParallel.apply(partial, self.group, self.traffic)  # (B, T, out), full
        return y + self.bias if self.bias is not None else y  # bias once, after the sum


class TensorParallelMLP(nn.Module):
    """The transformer MLP ``proj(gelu(fc(x)))`` split Megatron-style over a process group.

    ``fc`` is column parallel, ``proj`` row parallel: one all-reduce forward,
    one backward, both of the size of x.  Build it from a single-device
    :class:`gputrain.model.MLP` with :meth:`from_dense`.  Explained in chapter 8.
    """

    def __init__(self, n_embd: int, hidden: int, group: Optional[dist.ProcessGroup] = None):
        super().__init__()
        shard_range(hidden, dist.get_world_size(group), dist.get_rank(group), "hidden size")
        self.traffic = Traffic()  # all-reduced bytes of activations, shared by both layers
        self.fc = ColumnParallelLinear(n_embd, hidden, group=group, traffic=self.traffic)
        self.proj = RowParallelLinear(hidden, n_embd, group=group, traffic=self.traffic)

    @classmethod
    def from_dense(cls, mlp: nn.Module, group: Optional[dist.ProcessGroup] = None) -> "TensorParallelMLP":
        """Shard a dense GELU MLP with ``fc`` and ``proj`` linear layers (a GPT block's ``mlp``)."""
        if getattr(mlp, "activation", "gelu") != "gelu" or getattr(mlp, "hidden", None):
            raise ValueError(
                "from_dense expects a two-layer GELU MLP (fc -> GELU -> proj), like gputrain.model.Block(cfg).mlp"
            )
        tp = cls(mlp.fc.in_features, mlp.fc.out_features, group=group)
        tp.fc.load_dense(mlp.fc)
        tp.proj.load_dense(mlp.proj)
        return tp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))  # (B, T, C); GELU acts on each column slice alone


# --- per-rank function for gputrain.parallel.launch ------------------------------------------


def tensor_parallel_check(n_embd: int = 32, batch: int = 4, seq: int = 8, seed: int = 0) -> dict:
    """Compare the from-scratch TP MLP and ``torch.distributed.tensor.parallel`` with one device's MLP.

    Every rank builds the same dense MLP and input (same seed), runs it whole
    (the single-device reference), then runs its shard of :class:`TensorParallelMLP`
    and of the same MLP parallelized by ``parallelize_module`` with
    ``ColwiseParallel``/``RowwiseParallel``.  Outputs, the input gradient and
    every parameter gradient (this rank's slice) are compared.  Returns the
    largest differences and the activation bytes all-reduced.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    def dense_mlp() -> nn.Module:  # a GPT block's feed-forward: C -> 4C -> GELU -> C
        return Block(GPTConfig(n_embd=n_embd, n_head=1)).mlp.to(dev)

    dev = rank_device()
    torch.manual_seed(seed)
    dense = dense_mlp()
    x = torch.randn(batch, seq, n_embd, device=dev)  # (B, T, C), identical on every rank

    x_ref = x.clone().requires_grad_(True)
    y_ref = dense(x_ref)  # (B, T, C) one device, the whole MLP
    y_ref.square().mean().backward()

    tp = TensorParallelMLP.from_dense(dense, group=None)
    x_tp = x.clone().requires_grad_(True)
    y_tp = tp(x_tp)  # (B, T, C)
    y_tp.square().mean().backward()
    fc, proj = tp.fc, tp.proj
    errors = {
        "output": (y_tp - y_ref).abs().max().item(),
        "input grad": (x_tp.grad - x_ref.grad).abs().max().item(),
        "fc.weight grad": (fc.weight.grad - dense.fc.weight.grad[fc.start : fc.end]).abs().max().item(),
        "fc.bias grad": (fc.bias.grad - dense.fc.bias.grad[fc.start : fc.end]).abs().max().item(),
        "proj.weight grad": (proj.weight.grad - dense.proj.weight.grad[:, proj.start : proj.end]).abs().max().item(),
        "proj.bias grad": (proj.bias.grad - dense.proj.bias.grad).abs().max().item(),
    }

    # The same split through PyTorch's DTensor-based tensor parallelism.
    mesh = init_device_mesh(dev.type, (dist.get_world_size(),))
    torch.manual_seed(seed)
    library = parallelize_module(dense_mlp(), mesh, {"fc": ColwiseParallel(), "proj": RowwiseParallel()})
    x_lib = x.clone().requires_grad_(True)
    y_lib = library(x_lib)  # (B, T, C), a plain tensor (use_local_output=True)
    y_lib.square().mean().backward()
    errors["torch TP output"] = (y_lib - y_tp).abs().max().item()
    errors["torch TP fc.weight grad"] = (library.fc.weight.grad.to_local() - fc.weight.grad).abs().max().item()
    errors["torch TP proj.weight grad"] = (library.proj.weight.grad.to_local() - proj.weight.grad).abs().max().item()
    return {
        "errors": errors,
        "allreduces": tp.traffic.messages,
        "allreduced_bytes": tp.traffic.sent_bytes,
        "activation_bytes": x.numel() * x.element_size(),
        "fc_shard": tuple(fc.weight.shape),
        "proj_shard": tuple(proj.weight.shape),
    }

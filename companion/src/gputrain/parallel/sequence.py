"""Tensor-parallel attention, a whole tensor-parallel block, and sequence parallelism (chapter 8b).

Megatron-LM (Shoeybi et al. 2019) splits a transformer block over t ranks in
two column/row pairs: attention (the q, k, v projection column-parallel, so
each rank owns a/t whole heads; the output projection row-parallel) and the
MLP (``fc`` column-, ``fc2`` row-parallel).  Per block that is one all-reduce
after each row-parallel layer in the forward and one before each
column-parallel layer in the backward: 2 + 2.

Everything between those pairs (LayerNorms, dropouts, residual adds) is
*replicated*: every rank holds the whole (s, b, h) tensor.  Sequence
parallelism (Korthikanti et al. 2022) shards those regions along the
sequence instead.  An all-reduce is a reduce-scatter followed by an
all-gather, so the same traffic can be split: reduce-scatter after the
row-parallel layer (each rank keeps s/t positions), all-gather before the
column-parallel one.  The column-parallel layer keeps only its s/t shard of
the input for the backward and gathers it again there, so *every* activation
of the block is divided by t.

Tensors are laid out sequence-first, (S, B, H) as in Megatron, so shards are
contiguous slices of dimension 0.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from .launch import rank_device
from .tensor import shard_range


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


def korthikanti_per_layer(
    s: int, b: int, h: int, a: int, t: int = 1, sequence: bool = False, mask_bytes: int = 1
) -> float:
    """Activation bytes per layer per rank, Korthikanti et al. (2022) table 2, no recomputation.

    Tensor parallel: sbh(10 + 24/t + 5as/(ht)); with sequence parallelism:
    sbh(34/t + 5as/(ht)).  At t = 1 both are :func:`gputrain.memory.korthikanti_activations`.
    The paper stores dropout masks in 1 byte; PyTorch's CPU dropout keeps
    them in the activation's 2 bytes: ``mask_bytes=2`` adds the difference
    (two s·b·h residual masks, replicated without SP, and the a·s²·b/t attention mask).
    """
    replicated = 0 if sequence else 10
    paper = s * b * h * (replicated + (34 - replicated) / t + 5 * a * s / (h * t))
    masks = 2 * s * b * h / (t if sequence else 1) + a * s * s * b / t
    return paper + (mask_bytes - 1) * masks


def dropout_mask_bytes(dtype: torch.dtype = torch.bfloat16) -> int:
    """Bytes per element of the mask ``F.dropout`` saves for its backward, on this rank's device."""
    x = torch.ones(8, dtype=dtype, device=rank_device(), requires_grad=True)
    sizes: list[int] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t_: sizes.append(t_.element_size()) or t_, lambda t_: t_):
        F.dropout(x, 0.5, True)
    return sizes[0]


# --- per-rank functions for gputrain.parallel.launch ------------------------------------------


def _params_of(par: ParallelBlock, dense: DenseBlock) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """(this rank's gradient, the matching slice of the one-device gradient) for every parameter."""
    t, r = par.t, dist.get_rank()
    pairs = {
        f"{ln}.{k}": (getattr(getattr(par, ln), k).grad, getattr(getattr(dense, ln), k).grad)
        for ln in ("ln1", "ln2")
        for k in ("weight", "bias")
    }
    for name in ("qkv", "fc"):
        lo, hi = shard_range(getattr(dense, name).out_features, t, r)
        pairs[f"{name}.weight"] = (getattr(par, f"{name}_w").grad, getattr(dense, name).weight.grad[lo:hi])
        pairs[f"{name}.bias"] = (getattr(par, f"{name}_b").grad, getattr(dense, name).bias.grad[lo:hi])
    for name in ("proj", "fc2"):
        lo, hi = shard_range(getattr(dense, name).in_features, t, r)
        pairs[f"{name}.weight"] = (getattr(par, f"{name}_w").grad, getattr(dense, name).weight.grad[:, lo:hi])
        pairs[f"{name}.bias"] = (getattr(par, f"{name}_b").grad, getattr(dense, name).bias.grad)
    return pairs


def block_check(s: int = 8, b: int = 2, h: int = 16, a: int = 4, sequence: bool = False, seed: int = 0) -> dict:
    """A :class:`ParallelBlock` against the one-device :class:`DenseBlock`, float64, forward and backward.

    Returns the largest difference of the output, the input gradient and
    every parameter gradient (this rank's slice), the collectives made and
    the bytes this rank sent, and the size of one (s, b, h) activation.
    """
    t, r, dev = dist.get_world_size(), dist.get_rank(), rank_device()
    torch.manual_seed(seed)
    dense = DenseBlock(h, a).double().to(dev)
    x = torch.randn(s, b, h, dtype=torch.float64, device=dev)  # (S, B, H), the same on every rank
    g = torch.randn(s, b, h, dtype=torch.float64, device=dev)  # weights of a linear loss sum(g * y)
    x_ref = x.clone().requires_grad_(True)
    y_ref = dense(x_ref)  # (S, B, H)
    (g * y_ref).sum().backward()

    par = ParallelBlock(dense, sequence=sequence)
    lo, hi = shard_range(s, t, r, "sequence length") if sequence else (0, s)
    x_par = x[lo:hi].clone().requires_grad_(True)  # (S/t or S, B, H)
    y_par = par(x_par)
    (g[lo:hi] * y_par).sum().backward()  # summed over ranks under SP: the same loss
    par.sync_grads()
    errors = {
        "output": (y_par - y_ref[lo:hi]).abs().max().item(),
        "input grad": (x_par.grad - x_ref.grad[lo:hi]).abs().max().item(),
    }
    errors.update({k: (mine - ref).abs().max().item() for k, (mine, ref) in _params_of(par, dense).items()})
    return {
        "errors": errors,
        "calls": dict(par.log.calls),
        "sent_bytes": par.log.sent_bytes,
        "activation_bytes": s * b * h * 8,
    }


def saved_activation_bytes(
    s: int,
    b: int,
    h: int,
    a: int,
    sequence: bool = False,
    dropout: float = 0.1,
    dtype: torch.dtype = torch.bfloat16,
    seed: int = 0,
) -> dict:
    """Bytes autograd saves for the backward of one block on this rank (16-bit activations, 1-byte masks).

    Parameters, the s x s causal mask and the LayerNorms' per-position mean
    and 1/std (s·b numbers each, which Korthikanti et al. leave out) are
    excluded.  With one rank this measures the unsplit :class:`DenseBlock`.
    """
    torch.manual_seed(seed)
    dense = DenseBlock(h, a, dropout).to(dtype).to(rank_device())
    t = dist.get_world_size()
    block = ParallelBlock(dense, sequence) if t > 1 else dense
    rows = s // t if sequence else s
    x = torch.randn(rows, b, h, dtype=dtype, device=rank_device(), requires_grad=True)  # (S or S/t, B, H)
    skip = {p.untyped_storage().data_ptr() for p in block.parameters()} | {x.untyped_storage().data_ptr()}
    seen: dict[int, tuple[int, str]] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        st = tensor.untyped_storage()
        small = tensor.shape[-1:] == (1,) or tuple(tensor.shape) == (s, s)  # LayerNorm stats, causal mask
        if st.data_ptr() not in skip and not small:
            seen[st.data_ptr()] = (st.nbytes(), f"{tuple(tensor.shape)} {tensor.dtype}")
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t_: t_):
        y = block(x)
    y.float().sum().backward()
    # The block's input is saved too (by the first LayerNorm): count it like Korthikanti et al.
    total = sum(n for n, _ in seen.values()) + x.numel() * x.element_size()
    mask = dropout_mask_bytes(dtype)
    return {
        "bytes": total,
        "mask_bytes": mask,
        "paper": korthikanti_per_layer(s, b, h, a, t, sequence),
        "formula": korthikanti_per_layer(s, b, h, a, t, sequence, mask),
        "tensors": sorted(seen.values(), reverse=True),
    }


def torch_tp_check(s: int = 8, b: int = 2, h: int = 16, a: int = 4, sequence: bool = False, seed: int = 0) -> dict:
    """The same block split by ``torch.distributed.tensor.parallel`` (Colwise/Rowwise[/SequenceParallel]) vs ours."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel, parallelize_module

    t, r, dev = dist.get_world_size(), dist.get_rank(), rank_device()
    torch.manual_seed(seed)
    dense = DenseBlock(h, a).double().to(dev)
    x = torch.randn(s, b, h, dtype=torch.float64, device=dev)  # (S, B, H)
    g = torch.randn(s, b, h, dtype=torch.float64, device=dev)
    lo, hi = shard_range(s, t, r, "sequence length") if sequence else (0, s)
    ours = ParallelBlock(dense, sequence=sequence)
    y_ours = ours(x[lo:hi].clone())
    (g[lo:hi] * y_ours).sum().backward()
    ours.sync_grads()

    if sequence:
        plan = {
            "ln1": SequenceParallel(sequence_dim=0),
            "ln2": SequenceParallel(sequence_dim=0),
            "qkv": ColwiseParallel(input_layouts=Shard(0)),
            "fc": ColwiseParallel(input_layouts=Shard(0)),
            "proj": RowwiseParallel(output_layouts=Shard(0)),
            "fc2": RowwiseParallel(output_layouts=Shard(0)),
        }
    else:
        plan = {"qkv": ColwiseParallel(), "fc": ColwiseParallel(), "proj": RowwiseParallel(), "fc2": RowwiseParallel()}
    lib = parallelize_module(copy.deepcopy(dense), init_device_mesh(dev.type, (t,)), plan)
    y_lib = lib(x[lo:hi].clone())
    (g[lo:hi] * y_lib).sum().backward()
    local = lambda p: p.to_local() if hasattr(p, "to_local") else p  # noqa: E731
    errors = {
        "output": (y_lib - y_ours).abs().max().item(),
        "qkv.weight grad": (local(lib.qkv.weight.grad) - ours.qkv_w.grad).abs().max().item(),
        "fc2.weight grad": (local(lib.fc2.weight.grad) - ours.fc2_w.grad).abs().max().item(),
    }
    ln = lib.ln1.weight.grad
    errors["ln1.weight grad"] = (
        ((ln.full_tensor() if hasattr(ln, "full_tensor") else ln) - ours.ln1.weight.grad).abs().max().item()
    )
    return errors

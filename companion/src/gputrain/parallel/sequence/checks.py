"""Per-rank checks for gputrain.parallel.launch: the split block against one device, and the bytes it saves."""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist

from ..launch import rank_device
from ..tensor import shard_range
from .activations import dropout_mask_bytes, korthikanti_per_layer
from .block import DenseBlock, ParallelBlock


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

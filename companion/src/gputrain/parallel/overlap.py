"""Data parallelism by hand, naive and bucketed: hiding the all-reduce behind the backward (chapter 8b).

Plain data parallelism waits for the whole backward pass, then all-reduces
every gradient: the network idles while the processors compute, then the
processors idle while the network works.  PyTorch's DistributedDataParallel
(Li et al. 2020) overlaps the two.  Gradients become ready in reverse layer
order during the backward; they are grouped into *buckets* of roughly
``bucket_bytes``, and as soon as the last gradient of a bucket has been
accumulated, that bucket's all-reduce is launched asynchronously
(``async_op=True``) while the backward carries on with earlier layers.  The
optimizer step waits on the handles.

Buckets trade launch count against overlap: one huge bucket is the naive
scheme (nothing starts before the backward ends); tiny buckets pay the
per-message latency many times.  :class:`BucketedAllReduce` implements the
scheme with ``register_post_accumulate_grad_hook``; :func:`naive_all_reduce`
is the baseline; :func:`overlap_check` and :func:`overlap_timing` compare them
with DDP on real processes, and :func:`overlap_trace` records the timeline.
"""

from __future__ import annotations

import copy
import statistics
import time
from dataclasses import dataclass, field
from typing import Optional

import matplotlib.pyplot as plt
import torch
import torch.distributed as dist
import torch.nn as nn

from .launch import rank_device


def naive_all_reduce(model: nn.Module, group: Optional[dist.ProcessGroup] = None) -> int:
    """After the backward: all-reduce and average every gradient, one blocking call each.  Returns calls made."""
    world, calls = dist.get_world_size(group), 0
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=group)  # waits: nothing overlaps with compute
            p.grad.div_(world)
            calls += 1
    return calls


@dataclass
class Bucket:
    """Parameters whose gradients travel in one all-reduce, and that all-reduce's bookkeeping."""

    params: list[nn.Parameter]
    ready: int = 0  # gradients accumulated so far in this step
    buffer: Optional[torch.Tensor] = None  # flat gradients being reduced
    handle: Optional[dist.Work] = None
    launched: float = 0.0  # perf_counter when the all-reduce was launched
    completed: list[float] = field(default_factory=list)  # when it finished (set by a gloo/NCCL callback)

    @property
    def nbytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.params)


class BucketedAllReduce:
    """Gradient hooks that all-reduce buckets of gradients asynchronously while the backward runs.

    Parameters are taken in *reverse* registration order (the order their
    gradients appear in the backward) and packed greedily into buckets of at
    least ``bucket_bytes`` (the last one may be smaller).  Call :meth:`wait`
    after ``loss.backward()`` and before ``optimizer.step()``: it waits on every
    handle and writes the averaged gradients back.  Explained in chapter 8b.
    """

    def __init__(self, model: nn.Module, bucket_bytes: float, group: Optional[dist.ProcessGroup] = None):
        if not bucket_bytes > 0:
            raise ValueError(f"bucket_bytes must be > 0, got {bucket_bytes!r}; pass e.g. 25e6 (DDP's 25 MB)")
        self.group, self.world = group, dist.get_world_size(group)
        self.buckets: list[Bucket] = []
        current: list[nn.Parameter] = []
        for p in reversed([p for p in model.parameters() if p.requires_grad]):
            current.append(p)
            if sum(q.numel() * q.element_size() for q in current) >= bucket_bytes:
                self.buckets.append(Bucket(current))
                current = []
        if current:
            self.buckets.append(Bucket(current))
        self._home = {id(p): b for b in self.buckets for p in b.params}
        self._hooks = [p.register_post_accumulate_grad_hook(self._on_grad) for b in self.buckets for p in b.params]

    def _on_grad(self, param: nn.Parameter) -> None:
        bucket = self._home[id(param)]
        bucket.ready += 1
        if bucket.ready < len(bucket.params):
            return
        bucket.buffer = torch.cat([p.grad.reshape(-1) for p in bucket.params])  # (bucket numel,)
        bucket.launched = time.perf_counter()
        bucket.completed = []
        bucket.handle = dist.all_reduce(bucket.buffer, group=self.group, async_op=True)
        done = bucket.completed  # the callback runs on the communication thread when the reduce ends
        bucket.handle.get_future().then(lambda fut: done.append(time.perf_counter()))

    def wait(self) -> None:
        """Wait for every bucket's all-reduce, average, and write the gradients back; reset for the next step."""
        for bucket in self.buckets:
            if bucket.handle is None:
                raise RuntimeError("a bucket never filled: did every parameter get a gradient this step?")
            bucket.handle.wait()
            bucket.buffer.div_(self.world)
            offset = 0
            for p in bucket.params:
                p.grad.copy_(bucket.buffer[offset : offset + p.numel()].view_as(p.grad))
                offset += p.numel()
            bucket.ready, bucket.handle = 0, None

    def remove(self) -> None:
        for h in self._hooks:
            h.remove()


# --- per-rank functions for gputrain.parallel.launch ------------------------------------------


def mlp(width: int, depth: int, seed: int = 0) -> nn.Sequential:
    """``depth`` Linear(width, width) + GELU layers: gradients of 4·width² bytes each, in float32."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*layers)


def _data(batch: int, width: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed + dist.get_rank())  # each rank its own samples
    return torch.randn(batch, width, generator=g), torch.randn(batch, width, generator=g)  # (B, W) each


def _step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, sync) -> None:
    for p in model.parameters():
        p.grad = None
    (model(x) - y).square().mean().backward()
    sync()


def overlap_check(width: int = 16, depth: int = 3, batch: int = 4, bucket_bytes: float = 600.0, seed: int = 0) -> dict:
    """Gradients of naive and bucketed data parallelism against DistributedDataParallel's, on this rank."""
    dev = rank_device()
    x, y = (t.to(dev) for t in _data(batch, width, seed))
    grads = {}
    ddp = nn.parallel.DistributedDataParallel(mlp(width, depth, seed).to(dev), bucket_cap_mb=bucket_bytes / 2**20)
    _step(ddp, x, y, lambda: None)
    grads["ddp"] = [p.grad.clone() for p in ddp.parameters()]
    naive = mlp(width, depth, seed).to(dev)
    _step(naive, x, y, lambda: naive_all_reduce(naive))
    grads["naive"] = [p.grad.clone() for p in naive.parameters()]
    model = mlp(width, depth, seed).to(dev)
    bucketed = BucketedAllReduce(model, bucket_bytes)
    for _ in range(2):  # twice: the hooks must reset between steps
        _step(model, x, y, bucketed.wait)
    grads["bucketed"] = [p.grad.clone() for p in model.parameters()]
    local = mlp(width, depth, seed).to(dev)
    _step(local, x, y, lambda: None)
    err = lambda k: max((a - b).abs().max().item() for a, b in zip(grads[k], grads["ddp"]))  # noqa: E731
    return {
        "naive_vs_ddp": err("naive"),
        "bucketed_vs_ddp": err("bucketed"),
        "local_vs_ddp": max((p.grad - b).abs().max().item() for p, b in zip(local.parameters(), grads["ddp"])),
        "buckets": [b.nbytes for b in bucketed.buckets],
    }


def overlap_timing(
    width: int, depth: int, batch: int, bucket_sizes: list[float], steps: int = 5, seed: int = 0
) -> dict:
    """Step time (forward, backward, all-reduce) of no sync, naive, bucketed at each size, and DDP.

    Returns the median and the best (least disturbed) of ``steps`` steps of each.
    """
    dev = rank_device()
    x, y = (t.to(dev) for t in _data(batch, width, seed))
    model = mlp(width, depth, seed).to(dev)
    runs: dict[str, tuple[nn.Module, object]] = {
        "compute only": (model, lambda: None),
        "naive": (model, lambda: naive_all_reduce(model)),
    }
    for size in bucket_sizes:
        m = copy.deepcopy(model)
        runs[f"bucketed {size / 2**20:g} MiB"] = (m, BucketedAllReduce(m, size).wait)
    for size in bucket_sizes:
        ddp = nn.parallel.DistributedDataParallel(copy.deepcopy(model), bucket_cap_mb=size / 2**20)
        runs[f"DDP {size / 2**20:g} MiB"] = (ddp, lambda: None)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for step in range(steps + 1):  # step 0 warms up; interleave the variants so load spikes hit all
        for name, (m, sync) in runs.items():
            dist.barrier()
            t0 = time.perf_counter()
            _step(m, x, y, sync)
            if step:
                times[name].append(time.perf_counter() - t0)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return {
        "median": {k: statistics.median(v) for k, v in times.items()},
        "best": {k: min(v) for k, v in times.items()},
        "grad_bytes": grad_bytes,
    }


def overlap_trace(width: int, depth: int, batch: int, bucket_bytes: float, steps: int = 3, seed: int = 0) -> dict:
    """Timestamps of one bucketed step: each Linear's backward (start, end), each bucket's (launch, done).

    Times are seconds from the start of the backward, from the last of
    ``steps`` steps.  Layer ``i`` is the i-th Linear counted from the input.
    """
    dev = rank_device()
    x, y = (t.to(dev) for t in _data(batch, width, seed))
    model = mlp(width, depth, seed).to(dev)
    bucketed = BucketedAllReduce(model, bucket_bytes)
    linears = [m for m in model if isinstance(m, nn.Linear)]
    spans: dict[int, list[float]] = {}
    for i, lin in enumerate(linears):
        lin.register_full_backward_pre_hook(lambda mod, g, i=i: spans.__setitem__(i, [time.perf_counter()]))
        lin.register_full_backward_hook(lambda mod, gi, go, i=i: spans[i].append(time.perf_counter()))
    for _ in range(steps):
        for p in model.parameters():
            p.grad = None
        loss = (model(x) - y).square().mean()
        dist.barrier()
        t0 = time.perf_counter()
        loss.backward()
        t_backward = time.perf_counter()
        bucketed.wait()
        t_end = time.perf_counter()
    layer_of = {id(lin.weight): i for i, lin in enumerate(linears)}
    buckets = [
        {
            "launch": b.launched - t0,
            "done": (b.completed[0] if b.completed else t_end) - t0,
            "bytes": b.nbytes,
            "layers": sorted({layer_of[id(p)] for p in b.params if id(p) in layer_of}),
        }
        for b in bucketed.buckets
    ]
    return {
        "layers": {i: (s - t0, e - t0) for i, (s, e) in spans.items()},
        "buckets": buckets,
        "backward_end": t_backward - t0,
        "step_end": t_end - t0,
    }


def draw_overlap(ax, trace: dict, title: str = "") -> None:
    """Draw one rank's :func:`overlap_trace`: backward of each layer on one row, all-reduces on another."""
    ms = 1e3
    cmap = plt.get_cmap("tab10")
    for i, (s, e) in trace["layers"].items():
        ax.add_patch(plt.Rectangle((s * ms, 0.6), (e - s) * ms, 0.8, color="tab:orange", ec="white"))
        ax.text((s + e) / 2 * ms, 1.0, str(i), ha="center", va="center", fontsize=7)
    for j, b in enumerate(trace["buckets"]):
        ax.add_patch(
            plt.Rectangle(
                (b["launch"] * ms, -0.4 + 0.15 * (j % 2)),
                (b["done"] - b["launch"]) * ms,
                0.65,
                color=cmap(j % 10),
                alpha=0.8,
                ec="white",
            )
        )
    ax.axvline(trace["backward_end"] * ms, color="k", lw=0.8, ls="--")
    ax.set_yticks([0, 1], ["all-reduce\n(buckets)", "backward\n(layer)"])
    ax.set_ylim(-0.6, 1.6)
    ax.set_xlim(0, trace["step_end"] * ms * 1.02)
    ax.set_xlabel("ms since the backward began (dashed: backward done)")
    ax.set_title(title, fontsize=10)

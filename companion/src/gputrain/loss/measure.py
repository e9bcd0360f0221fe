"""Measuring the memory the chunked loss saves: peak bytes on a GPU or a CPU, naive head against chunked (chapter 3)."""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
from typing import Callable, Optional

import torch

from ..device import Timer, synchronize
from ..device import device as default_device
from .chunked import chunked_cross_entropy, logits_bytes, naive_head_cross_entropy


@contextlib.contextmanager
def _quiet_fds():
    """Silence file descriptors 1 and 2: the profiler's C++ side prints start/stop markers there."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def peak_memory(fn: Callable[[], object], dev: Optional[torch.device] = None) -> int:
    """Peak bytes allocated while ``fn()`` runs, above what was allocated before it.

    On a GPU: ``torch.cuda.max_memory_allocated``.  On the CPU there is no such
    counter, so the profiler records every allocation and free of the CPU
    allocator (``profile_memory=True``) and we replay them in time order.
    """
    dev = dev or default_device()
    if dev.type == "cuda":
        synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
        fn()
        synchronize(dev)
        return torch.cuda.max_memory_allocated(dev) - base
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with _quiet_fds(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    sizes, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:  # walk the event tree; allocation events carry a signed size
        node = stack.pop()
        if node.typed[0] == _EventType.Allocation:
            sizes.append((node.start_time_ns, node.typed[1].alloc_size))
        stack.extend(node.children)
    live = peak = 0
    for _, size in sorted(sizes):
        live += size
        peak = max(peak, live)
    return peak


def compare_head_memory(
    batch: int,
    seq: int,
    vocab: int,
    width: int,
    chunk_size: int = 1024,
    dtype: torch.dtype = torch.float32,
    dev: Optional[torch.device] = None,
    repeats: int = 3,
    seed: int = 0,
) -> dict:
    """Peak memory and time of forward + backward through the output head: naive vs chunked.

    Used by chapter 3 (CPU, live) and ``bench/gpu/chunked_loss.py`` (GPT-2 scale on a GPU).
    """
    dev = dev or default_device()
    g = torch.Generator(device="cpu").manual_seed(seed)
    hidden = torch.randn(batch, seq, width, generator=g).to(dev, dtype).requires_grad_()  # (B, T, C)
    weight = (0.02 * torch.randn(vocab, width, generator=g)).to(dev, dtype).requires_grad_()  # (V, C)
    targets = torch.randint(0, vocab, (batch, seq), generator=g).to(dev)  # (B, T)
    out: dict = {
        "batch": batch,
        "seq": seq,
        "vocab": vocab,
        "width": width,
        "chunk_size": chunk_size,
        "dtype": str(dtype).removeprefix("torch."),
        "device": str(dev),
        "logits_bytes_fp32": logits_bytes(batch, seq, vocab),
    }
    losses = {
        "naive": lambda: naive_head_cross_entropy(hidden, weight, targets),
        "chunked": lambda: chunked_cross_entropy(hidden, weight, targets, chunk_size),
    }
    for name, loss_fn in losses.items():

        def step() -> torch.Tensor:
            loss = loss_fn()
            loss.backward()
            return loss.detach()

        out[f"{name}_loss"] = step().item()  # also the warm-up (allocator caches, kernel choice)
        hidden.grad = weight.grad = None  # free old gradients outside the measured region
        out[f"{name}_peak_bytes"] = peak_memory(step, dev)
        seconds = []
        for _ in range(repeats):
            hidden.grad = weight.grad = None
            with Timer(dev) as t:
                step()
            seconds.append(t.seconds)
        hidden.grad = weight.grad = None
        out[f"{name}_seconds"] = statistics.median(seconds)
    out["saving_factor"] = out["naive_peak_bytes"] / out["chunked_peak_bytes"]
    return out

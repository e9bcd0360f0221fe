"""Where a function's time and traffic go, operator by operator: :func:`time_shares` and :func:`count_ops`."""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ..device import synchronize


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 (C++ logging bypasses ``sys.stderr``) inside the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(devnull)
        os.close(saved)


def time_shares(fn: Callable, *args, rounds: int = 3, **kwargs) -> dict[str, float]:
    """Fraction of run time per operator over ``rounds`` calls, measured with ``torch.profiler``.

    Self time of each ``aten`` operator: GPU kernel time when CUDA is
    available, CPU time otherwise.  Keys match :attr:`FlopCount.by_op`
    ("aten.addmm"), so time shares and FLOP shares can be set side by side.
    """
    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    fn(*args, **kwargs)  # warm-up: first calls allocate and pick kernels
    synchronize()
    prof = profile(activities=activities)
    with _quiet_stderr():  # torch 2.13's profiler prints a trace line at start and stop
        prof.start()
    try:
        for _ in range(rounds):
            fn(*args, **kwargs)
        synchronize()
    finally:
        with _quiet_stderr():
            prof.stop()
    attr = "self_device_time_total" if cuda else "self_cpu_time_total"
    times = {e.key.replace("::", "."): getattr(e, attr) for e in prof.key_averages() if e.key.startswith("aten::")}
    times = {k: v for k, v in times.items() if v > 0}
    total = sum(times.values())
    return {k: v / total for k, v in sorted(times.items(), key=lambda kv: -kv[1])}


@dataclass
class OpCount:
    """Operator calls of one function and the bytes they touch (appendix "Making it fast")."""

    calls: dict[str, int]  # "aten._foreach_mul_" -> calls
    bytes_moved: int  # inputs read + outputs and in-place updates written: memory traffic if nothing stays in cache

    @property
    def total(self) -> int:
        return sum(self.calls.values())


def count_ops(fn: Callable, *args, **kwargs) -> OpCount:
    """Count the ``aten`` operators ``fn(*args, **kwargs)`` runs, and the bytes they read and write.

    In eager PyTorch each operator call is at least one kernel launch on a GPU
    and one pass over its operands in memory, so the count measures launch
    overhead and the bytes measure traffic.  Fusion (a fused optimizer,
    ``torch.compile``) shows up as fewer calls touching fewer bytes.
    """
    calls: dict[str, int] = {}
    moved = [0]

    def nbytes(obj) -> int:
        return sum(t.numel() * t.element_size() for t in tree_leaves(obj) if isinstance(t, torch.Tensor))

    class Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = str(func.overloadpacket).replace("::", ".")
            if not name.startswith("aten."):  # profiler markers and the like launch nothing
                return out
            calls[name] = calls.get(name, 0) + 1
            schema = func._schema
            written = [a for a, arg in zip(args, schema.arguments) if arg.alias_info and arg.alias_info.is_write]
            written += [
                kwargs[arg.name]
                for arg in schema.arguments
                if arg.name in kwargs and arg.alias_info and arg.alias_info.is_write
            ]
            fresh = [
                o for o, ret in zip(out if isinstance(out, tuple) else (out,), schema.returns) if ret.alias_info is None
            ]  # outputs that are not one of the inputs, updated in place
            moved[0] += nbytes((args, kwargs)) + nbytes(written) + nbytes(fresh)  # every input read once
            return out

    with Counter():
        fn(*args, **kwargs)
    return OpCount(calls=dict(sorted(calls.items(), key=lambda kv: -kv[1])), bytes_moved=moved[0])

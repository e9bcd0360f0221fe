"""Counting the bytes a kernel asks memory for, from inside the kernel (chapter 11).

A :class:`Traffic` is two int64 counters, bytes read and bytes written.  A
kernel launched with one adds, in every program, the size of every masked load
and store it issues, with ``tl.atomic_add``: so the count is what the kernel
*requested* from global memory, compiled on a GPU as well as interpreted on
the CPU.  (On a GPU the L2 cache may serve some requests without touching HBM;
the counter counts what the code asks for, which is what a kernel author
controls.)  Launched without one, the counting code is compiled out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from .launch import kernel_device, tl, triton


class Traffic:
    """Bytes read and written by the kernels it is passed to (it accumulates until :meth:`reset`)."""

    def __init__(self, device: Optional[torch.device] = None):
        self.counts = torch.zeros(2, dtype=torch.int64, device=device or kernel_device())  # [read, written]

    @property
    def read(self) -> int:
        return int(self.counts[0].item())

    @property
    def written(self) -> int:
        return int(self.counts[1].item())

    @property
    def total(self) -> int:
        return self.read + self.written

    def reset(self) -> "Traffic":
        self.counts.zero_()
        return self

    def snapshot(self) -> "Bytes":
        return Bytes(self.read, self.written)

    def __repr__(self) -> str:
        return f"Traffic(read={self.read:,} B, written={self.written:,} B)"


@dataclass(frozen=True)
class Bytes:
    """A frozen reading of a :class:`Traffic`."""

    read: int
    written: int

    @property
    def total(self) -> int:
        return self.read + self.written


def counter_args(traffic: Optional[Traffic], device: torch.device) -> tuple[torch.Tensor, bool]:
    """The pointer and the ``COUNT`` flag a kernel takes: a real counter, or a dummy and counting off."""
    if traffic is None:
        return torch.zeros(2, dtype=torch.int64, device=device), False
    if traffic.counts.device.type != device.type:
        raise ValueError(f"the Traffic counter is on {traffic.counts.device}, the tensors on {device}")
    return traffic.counts, True


@triton.jit
def count_read(counter, mask, ELEM_BYTES: tl.constexpr):
    """Add the bytes of one masked load (every True in ``mask`` is one element of ELEM_BYTES bytes)."""
    tl.atomic_add(counter, tl.sum(mask.to(tl.int64)) * ELEM_BYTES)


@triton.jit
def count_write(counter, mask, ELEM_BYTES: tl.constexpr):
    """Add the bytes of one masked store."""
    tl.atomic_add(counter + 1, tl.sum(mask.to(tl.int64)) * ELEM_BYTES)

"""One GPU's memory hierarchy, registers to HBM, drawn from the GPU table (chapter 11, "The memory hierarchy")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .lookup import gpu_spec
from .table import GPU_SPECS


@dataclass(frozen=True)
class MemoryLevel:
    """One level of a GPU's memory hierarchy, with where its figures come from (chapter 11)."""

    level: str  # "registers", "shared memory", "L2", "HBM"
    capacity: float  # bytes on the whole chip
    per_sm: Optional[int]  # bytes per SM, for the levels each SM has its own of
    bandwidth: Optional[float]  # bytes/s for the whole chip; None where no source gives one
    sources: tuple[str, ...]  # BibTeX keys


def memory_hierarchy(name: str) -> list[MemoryLevel]:
    """Registers -> shared memory -> L2 -> HBM of one GPU, nearest the arithmetic first (chapter 11).

    The order is the path data takes to the arithmetic units, not size: on
    Hopper and Ampere an SM's register file (256 KiB) is larger than its
    shared memory (at most 228 or 164 KiB); from shared memory on, each level
    is larger and further away.

    Shared-memory bandwidth is :attr:`GPUSpec.shared_bandwidth`; the register
    file has no published bandwidth, nor has Hopper's L2 (the A100's has),
    so those stay ``None``.  One clear error for a GPU the table holds no
    memory figures for.
    """
    spec = gpu_spec(name)
    if spec is None or spec.sms is None:
        known = ", ".join(k for k, s in GPU_SPECS.items() if s.sms)
        raise ValueError(f"no memory figures for {name!r} in gputrain.device.GPU_SPECS; use one of: {known}")
    src = spec.sources

    def keys(*fields: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(k for f in fields for k in src.get(f, ())))

    return [
        MemoryLevel(
            "registers", spec.registers_per_sm * spec.sms, spec.registers_per_sm, None, keys("registers_per_sm", "sms")
        ),
        MemoryLevel(
            "shared memory",
            spec.shared_per_sm * spec.sms,
            spec.shared_per_sm,
            spec.shared_bandwidth,
            keys("shared_per_sm", "shared_bytes_per_clock", "sms", "boost_clock_hz"),
        ),
        MemoryLevel("L2", spec.l2_bytes, None, spec.l2_bandwidth, keys("l2_bytes", "l2_bytes_per_clock")),
        MemoryLevel("HBM", spec.hbm_bytes, None, spec.hbm_bandwidth, keys("hbm_bytes", "hbm_bandwidth")),
    ]

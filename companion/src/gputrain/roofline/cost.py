"""One operation's cost, counted by formula: its FLOPs and the bytes it moves (chapter 11)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OpCost:
    """FLOPs and main-memory bytes of one operation, counted by formula (chapter 11)."""

    name: str
    flops: float
    bytes: float  # moved between the chip and its main memory (HBM on a GPU, DRAM on a CPU)
    rule: str  # how the two were counted, in one sentence
    scratch: float = 0.0  # bytes of intermediate results the operation keeps in main memory

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: FLOPs per byte moved."""
        return self.flops / self.bytes


def _check_sizes(**sizes: int) -> None:
    bad = {k: v for k, v in sizes.items() if not (isinstance(v, int) and v >= 1)}
    if bad:
        shown = ", ".join(f"{k}={v!r}" for k, v in bad.items())
        raise ValueError(f"sizes must be positive integers, got {shown}")

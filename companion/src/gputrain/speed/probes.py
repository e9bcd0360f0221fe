"""The two roofs measured: matrix-product throughput (:func:`matmul_tflops`) and copy bandwidth (chapter 2)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from ..device import device, median_seconds, peak_flops
from .switches import fp32_matmul

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "tf32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


@dataclass
class MatmulProbe:
    """Throughput of one square matrix product ``(n x n) @ (n x n)``."""

    n: int
    dtype: str
    device: str
    seconds: float  # median time of one product
    tflops: float  # 2 n^3 / seconds / 1e12
    peak_tflops: Optional[float]  # datasheet peak of this device and dtype, None if unknown (CPUs)

    @property
    def fraction_of_peak(self) -> Optional[float]:
        return self.tflops / self.peak_tflops if self.peak_tflops else None

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved if A, B and C cross memory once: 2n^3 / (3 n^2 bytes)."""
        return 2 * self.n / (3 * DTYPES[self.dtype].itemsize)

    def to_dict(self) -> dict:
        """A JSON-ready row (as stored in ``book/results/matmul.json``)."""
        return {
            "n": self.n,
            "dtype": self.dtype,
            "seconds": self.seconds,
            "tflops": self.tflops,
            "peak_tflops": self.peak_tflops,
            "fraction_of_peak": self.fraction_of_peak,
            "intensity_flop_per_byte": self.intensity,
        }


def matmul_tflops(
    n: int, dtype: str = "bf16", dev: Optional[torch.device] = None, target_seconds: float = 0.2
) -> MatmulProbe:
    """Measure TFLOP/s of an n x n x n product in ``dtype`` (fp32, tf32, bf16, fp16) (chapter 2).

    On a GPU the result carries the datasheet peak, so ``fraction_of_peak`` says
    how close the chip came; "tf32" is float32 data on TF32 tensor cores.
    """
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of: {', '.join(DTYPES)}")
    dev = dev or device()
    if dtype == "tf32" and dev.type != "cuda":
        raise ValueError("tf32 is a mode of NVIDIA tensor cores; on the CPU measure 'fp32' instead")
    gen = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn(n, n, device=dev, dtype=DTYPES[dtype], generator=gen)  # (n, n)
    b = torch.randn(n, n, device=dev, dtype=DTYPES[dtype], generator=gen)  # (n, n)
    out = torch.empty(n, n, device=dev, dtype=DTYPES[dtype])  # reused: time the product, not allocation
    context = fp32_matmul("tf32" if dtype == "tf32" else "ieee") if dev.type == "cuda" else contextlib.nullcontext()
    with context:
        seconds = median_seconds(lambda: torch.mm(a, b, out=out), dev=dev, min_seconds=target_seconds / 5)
    peak = peak_flops(dtype) if dev.type == "cuda" else None
    return MatmulProbe(
        n=n,
        dtype=dtype,
        device=str(dev),
        seconds=seconds,
        tflops=2 * n**3 / seconds / 1e12,
        peak_tflops=peak / 1e12 if peak else None,
    )


def matmul_sweep(
    sizes: Sequence[int], dtypes: Sequence[str], dev: Optional[torch.device] = None, target_seconds: float = 0.1
) -> list[MatmulProbe]:
    """:func:`matmul_tflops` for every dtype and size: the data of a throughput-vs-size plot."""
    return [matmul_tflops(n, dt, dev, target_seconds) for dt in dtypes for n in sizes]


def copy_bandwidth(nbytes: int = 1 << 28, dev: Optional[torch.device] = None) -> float:
    """Measured memory bandwidth in bytes/s: a device-to-device copy reads and writes ``nbytes`` each.

    The memory roof of a roofline plot (chapter 2).
    """
    dev = dev or device()
    src = torch.empty(nbytes // 4, device=dev, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    seconds = median_seconds(lambda: dst.copy_(src), dev=dev)
    return 2 * src.numel() * 4 / seconds

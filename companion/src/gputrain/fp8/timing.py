"""Timing FP8 GEMMs against BF16 on prepared operands (chapter 10, part 5; the FP8 memory recipes are rows
of :data:`gputrain.memory.RECIPES`)."""

from __future__ import annotations

from typing import Callable

import torch

from ..device import Timer, median_seconds
from .quantize import quantize

GemmKind = str  # "bf16", "fp8-tensor", "fp8-row", "fp8-block"


def gemm_operands(kind: GemmKind, m: int, k: int, n: int, device: torch.device, seed: int = 0) -> Callable[[], object]:
    """A zero-argument function running one (m, k) @ (k, n) product of ``kind`` on prepared operands."""
    g = torch.Generator(device=device).manual_seed(seed)  # made where they are used: GPU-sized operands
    a = torch.randn(m, k, generator=g, device=device)  # (M, K)
    w = torch.randn(n, k, generator=g, device=device)  # (N, K)
    if kind == "bf16":
        a16, w16 = a.bfloat16(), w.bfloat16()
        return lambda: a16 @ w16.t()
    if kind in ("fp8-tensor", "fp8-row"):
        gran = kind.split("-")[1]
        qa, qw = quantize(a, "e4m3", gran), quantize(w, "e4m3", gran)
        sb = qw.scale.reshape(1, -1).contiguous()
        return lambda: torch._scaled_mm(qa.data, qw.data.t(), qa.scale, sb, out_dtype=torch.bfloat16)
    if kind == "fp8-block":
        qa, qw = quantize(a, "e4m3", "tile"), quantize(w, "e4m3", "block")
        sa, sb = qa.scale.t().contiguous().t(), qw.scale.t()  # outer-dim-major, as cuBLAS takes them
        return lambda: torch._scaled_mm(qa.data, qw.data.t(), sa, sb, out_dtype=torch.bfloat16)
    raise ValueError(f"unknown GEMM kind {kind!r}; use bf16, fp8-tensor, fp8-row or fp8-block")


def gemm_tflops(
    kind: GemmKind,
    m: int,
    k: int,
    n: int,
    device: "torch.device | str" = "cpu",
    repeats: int = 5,
    budget_s: float = 1.0,
) -> float:
    """Measured TFLOP/s (2mkn FLOPs per product) of one GEMM of ``kind``, operands already prepared.

    The first call is timed too: where it alone takes more than ``budget_s``
    over ``repeats + 1`` (a slow CPU kernel, 2,500x slower than FP32 on some
    CPUs), its time is the measurement, and the product is not run again.
    """
    device = torch.device(device)
    run = gemm_operands(kind, m, k, n, device)
    with Timer(device) as first:
        run()
    if first.seconds > budget_s / (repeats + 1):
        return 2 * m * k * n / first.seconds / 1e12
    return 2 * m * k * n / median_seconds(run, repeats, warmup=0, dev=device) / 1e12

"""Whether ``torch._scaled_mm`` is fast here, measured once per process (chapter 10).

On an AMX Intel Xeon the tensorwise kernel ran at 0.05 GFLOP/s, 2,500x
slower than FP32; the FP8 layers take the emulation where the kernel is slow.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Optional

import torch

from ..device import device_name, median_seconds
from ..speed import cpu_threads, forced_verdict
from .products import emulated_product, kernel_product
from .quantize import quantize


@dataclass(frozen=True)
class ScaledMMSpeed:
    """Whether ``torch._scaled_mm`` is fast here, per scaling (``"tensor"``, ``"row"``), measured once."""

    fast: dict  # granularity -> True: use the kernel; False: multiply the same FP8 numbers emulated
    slowdown: dict  # granularity -> time of _scaled_mm / time of the emulated product (1.0 on GPUs: not measured)
    reason: str  # one line for logs and the chapters

    def __str__(self) -> str:
        return self.reason


SCALED_MM_SLOW_FACTOR = 4.0  # a _scaled_mm this many times slower than the emulated product is not used


SCALED_MM_ENV = "GPUTRAIN_FAST_SCALED_MM"  # "0" (emulate) or "1" (kernel) overrides the measured verdict


FUSED = ("tensor", "row")  # the scalings torch._scaled_mm takes on every backend


def fast_scaled_mm(dev_type: Optional[str] = None) -> ScaledMMSpeed:
    """Measure once whether ``torch._scaled_mm`` is fast on this device, per scaling (chapter 10).

    A CUDA GPU with FP8 tensor cores (sm_89 or newer) runs it in hardware.  On
    a CPU the answer is measured, not guessed from CPU flags: a 64x64x64 FP8
    product through the kernel is timed against the emulated one (dequantize,
    FP32 product), which multiplies the same FP8 numbers.  On an AMX Intel Xeon
    the tensorwise kernel ran at 0.05 GFLOP/s, 2,500x slower than FP32, while
    the rowwise one kept pace; a scaling that is :data:`SCALED_MM_SLOW_FACTOR`
    times slower than the emulation is emulated by :class:`Float8Linear`.
    ``GPUTRAIN_FAST_SCALED_MM=0`` (or ``1``) overrides the verdict; the
    slowdown stays the measured one.
    """
    measured = _measured_scaled_mm(dev_type or ("cuda" if torch.cuda.is_available() else "cpu"))
    forced = forced_verdict(SCALED_MM_ENV, "emulate FP8 products", "use torch._scaled_mm")
    if forced is None:
        return measured
    verdict = "torch._scaled_mm" if forced else "emulated in FP32"
    return ScaledMMSpeed(
        {g: forced for g in FUSED}, measured.slowdown, f"FP8 products {verdict}: {SCALED_MM_ENV}={int(forced)}"
    )


@functools.lru_cache(maxsize=None)
def _measured_scaled_mm(dev_type: str, n: int = 64) -> ScaledMMSpeed:
    if dev_type == "cuda":
        cap = torch.cuda.get_device_capability()
        ok = tuple(cap) >= (8, 9)
        verdict = "FP8 tensor cores" if ok else "no FP8 tensor cores: emulate=True"
        return ScaledMMSpeed({g: ok for g in FUSED}, {g: 1.0 for g in FUSED}, f"torch._scaled_mm: {verdict}")
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)
    fast, slowdown = {}, {}
    with cpu_threads(1):
        for gran in FUSED:
            qa, qb = quantize(a, "e4m3", gran), quantize(b, "e4m3", gran)
            try:
                kernel = median_seconds(lambda: kernel_product(qa, qb), repeats=3, dev=torch.device("cpu"))
            except RuntimeError:  # this build has no CPU kernel for the scaling: emulate
                kernel = math.inf
            emulated = median_seconds(lambda: emulated_product(qa, qb), repeats=3, dev=torch.device("cpu"))
            slowdown[gran] = kernel / emulated
            fast[gran] = slowdown[gran] < SCALED_MM_SLOW_FACTOR
    shown = ", ".join(
        f"{g}wise {'kernel' if fast[g] else 'emulated'} ({slowdown[g]:.3g}x the emulated time)" for g in FUSED
    )
    return ScaledMMSpeed(fast, slowdown, f"torch._scaled_mm on {device_name()} at {n}^3: {shown}")


def emulates(granularity: str, dev_type: str) -> bool:
    """Whether an FP8 product with ``granularity`` scales is emulated by default on ``dev_type``.

    Tiles and blocks always are (no backend's ``_scaled_mm`` takes them on a
    CPU); tensor and row scales are where :func:`fast_scaled_mm` found the
    kernel slow.  A GPU always uses its kernel (and says so when it has none).
    """
    if granularity not in FUSED:
        return True
    return dev_type != "cuda" and not fast_scaled_mm(dev_type).fast[granularity]

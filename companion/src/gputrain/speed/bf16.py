"""Whether bf16 products are native here, measured once (chapter 7, appendix "Making it fast")."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Optional

import torch

from ..device import device, device_name, median_seconds
from .switches import cpu_threads


@dataclass(frozen=True)
class Bf16Support:
    """Whether this device multiplies bf16 matrices natively, and how much slower than fp32 it is."""

    native: bool
    slowdown: float  # time of a bf16 product / time of the same fp32 product (1.0 on GPUs: not measured)
    reason: str  # one line for logs and warnings

    def __str__(self) -> str:
        return self.reason


BF16_SLOW_FACTOR = 4.0  # a bf16 product this many times slower than fp32 is emulated in software


BF16_ENV = "GPUTRAIN_NATIVE_BF16"  # "0" or "1" overrides the measured verdict (tests, or to see the other path)


def native_bf16(dev_type: Optional[str] = None, n: int = 256) -> Bf16Support:
    """Measure once whether bf16 matrix products are native here (chapter 7, appendix "Making it fast").

    A CUDA GPU reports it (``torch.cuda.is_bf16_supported``).  On a CPU the
    answer is measured, not guessed from CPU flags: an ``n x n`` bf16 product is
    timed against the fp32 one.  CPUs without AVX-512 BF16, AMX or ARM's BF16
    instructions convert every operand in software, measured at 75x slower than
    fp32 on an AVX2-only AMD EPYC; such a CPU reports ``native=False`` and
    chapters emulate bf16 rounding in fp32 (:class:`gputrain.precision.EmulatedBf16`)
    instead of running bf16 products.  The environment variable
    ``GPUTRAIN_NATIVE_BF16=0`` (or ``1``) overrides the verdict; the
    slowdown is still the measured one.
    """
    measured = _measured_bf16(dev_type, n)
    forced = forced_verdict(BF16_ENV, "emulate bf16", "native")
    if forced is None:
        return measured
    verdict = "native" if forced else "emulated in FP32"
    return Bf16Support(forced, measured.slowdown, f"bf16 {verdict}: {BF16_ENV}={int(forced)} ({measured})")


def forced_verdict(env: str, off: str, on: str) -> Optional[bool]:
    """What the environment variable ``env`` forces on a measured fast path: ``"0"`` False, ``"1"`` True, unset None."""
    forced = os.environ.get(env, "")
    if forced not in ("", "0", "1"):
        raise ValueError(f"{env}={forced!r} must be 0 ({off}) or 1 ({on}), or unset to measure")
    return None if forced == "" else forced == "1"


@functools.lru_cache(maxsize=None)
def _measured_bf16(dev_type: Optional[str] = None, n: int = 256) -> Bf16Support:
    kind = dev_type or device().type
    if kind == "cuda":
        ok = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        return Bf16Support(ok, 1.0, f"bf16 {'native' if ok else 'not supported'} on {device_name()}")
    gen = torch.Generator().manual_seed(0)
    a32 = torch.randn(n, n, generator=gen)
    b32 = torch.randn(n, n, generator=gen)
    a16, b16 = a32.bfloat16(), b32.bfloat16()
    with cpu_threads(1):
        t32 = median_seconds(lambda: a32 @ b32, repeats=3, dev=torch.device("cpu"))
        t16 = median_seconds(lambda: a16 @ b16, repeats=3, dev=torch.device("cpu"))
    slowdown = t16 / t32
    native = slowdown < BF16_SLOW_FACTOR
    verdict = "native" if native else "emulated in software"
    return Bf16Support(native, slowdown, f"bf16 matmul {verdict} on this CPU ({slowdown:.1f}x the fp32 time at {n}^2)")

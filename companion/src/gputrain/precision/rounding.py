"""Rounding to any format from scratch, and the bit fields of a rounded value (chapter 7).

:func:`round_to_format` uses exponent and mantissa arithmetic alone, so it
also covers TF32, which has no torch dtype; ``tests/test_precision.py`` checks
it against PyTorch's own casts for every format that has one.
"""

from __future__ import annotations

import torch

from .formats import FloatFormat, get_format


def round_to_format(x: torch.Tensor, fmt: "str | FloatFormat") -> torch.Tensor:
    """Round ``x`` to the nearest value of ``fmt`` (ties to even), returned in ``x``'s dtype.

    Written from scratch with exponent/mantissa arithmetic, so it also covers
    TF32, which has no torch dtype; the tests check it against torch's casts
    for every format that has one.  Handles subnormals, overflow (to inf, or
    to ±max for saturating formats, as torch casts E4M3), inf and NaN.
    """
    f = get_format(fmt)
    a = x.detach().double().abs()  # float64 holds every step of the arithmetic exactly
    _, e2 = torch.frexp(a)  # a = m * 2**e2 with m in [0.5, 1)
    exponent = (e2 - 1).clamp(min=1 - f.bias)  # below the normal range the spacing stays fixed
    ulp = torch.pow(2.0, (exponent - f.mantissa_bits).double())  # spacing of representable values
    q = torch.round(a / ulp) * ulp  # torch.round rounds half to even
    q = torch.where(torch.isinf(a), a, q)  # inf stays inf (NaN is restored below)
    q = torch.where(q > f.max, torch.full_like(q, f.max if f.saturates else float("inf")), q)
    # copysign, not sign(x) * q: sign(-0.0) is +0, and casts keep -0.0 (as do tiny negatives rounded to 0)
    return torch.copysign(q, x.detach().double()).to(x.dtype).where(~torch.isnan(x), x)


def bit_fields(value: float, fmt: "str | FloatFormat") -> tuple[str, str, str]:
    """The (sign, exponent, mantissa) bit strings of ``value`` rounded to ``fmt``."""
    f = get_format(fmt)
    if f.dtype is None:  # TF32: the top 19 bits of the rounded FP32 pattern
        rounded = round_to_format(torch.tensor([value], dtype=torch.float32), f)
        bits = int(rounded.view(torch.int32).item()) & 0xFFFFFFFF
        pattern = f"{bits:032b}"[: f.bits]
    else:
        stored = torch.tensor([value], dtype=torch.float32).to(f.dtype)
        int_type = {8: torch.uint8, 16: torch.int16, 32: torch.int32}[f.bits]
        bits = int(stored.view(int_type).item()) & (2**f.bits - 1)
        pattern = f"{bits:0{f.bits}b}"
    return pattern[0], pattern[1 : 1 + f.exponent_bits], pattern[1 + f.exponent_bits :]

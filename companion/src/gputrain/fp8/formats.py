"""The two FP8 formats, E4M3 and E5M2, as PyTorch's real dtypes decode them (chapter 10, part 1)."""

from __future__ import annotations

import math
from typing import Sequence

import torch

from ..precision import FloatFormat, get_format

FP8_NAMES = ("e4m3", "e5m2")


GRANULARITIES = ("tensor", "row", "tile", "block")


TILE = 128  # DeepSeek-V3: 1x128 activation tiles, 128x128 weight blocks, promotion every 128 products


def fp8_format(fmt: "str | FloatFormat") -> FloatFormat:
    """The :class:`~gputrain.precision.FloatFormat` of ``"e4m3"`` or ``"e5m2"`` (FP8 only)."""
    try:
        f = get_format(fmt)
    except ValueError:
        f = None
    if f is None or f.bits != 8:
        raise ValueError(f"unknown FP8 format {fmt!r}; use 'e4m3' or 'e5m2'")
    return f


def _check_granularity(granularity: str) -> None:
    if granularity not in GRANULARITIES:
        raise ValueError(f"unknown granularity {granularity!r}; use one of: {', '.join(GRANULARITIES)}")


def _all_codes(fmt: "str | FloatFormat") -> torch.Tensor:
    """The 256 values the 256 bit patterns of an FP8 dtype decode to (NaN and inf included)."""
    return torch.arange(256, dtype=torch.int32).to(torch.uint8).view(fp8_format(fmt).dtype).float()


def representable(fmt: "str | FloatFormat", lo: float = -math.inf, hi: float = math.inf) -> torch.Tensor:
    """Every finite value of ``fmt`` in ``[lo, hi)``, sorted (+0 and -0 count once)."""
    v = _all_codes(fmt)
    v = torch.unique(v[torch.isfinite(v)])  # sorted
    return v[(v >= lo) & (v < hi)]


def format_facts(fmt: "str | FloatFormat") -> dict[str, object]:
    """Range and precision of an FP8 format: from its definition, from ``torch.finfo``, and counted."""
    f = fp8_format(fmt)
    info, codes = torch.finfo(f.dtype), _all_codes(f)
    return {
        "format": f.name,
        "exponent bits": f.exponent_bits,
        "mantissa bits": f.mantissa_bits,
        "max": f.max,
        "finfo max": float(info.max),
        "smallest normal": f.smallest_normal,
        "finfo smallest normal": float(info.smallest_normal),
        "smallest subnormal": f.smallest_subnormal,
        "eps (gap above 1)": f.eps,
        "values in [1, 2)": len(representable(f, 1.0, 2.0)),
        "finite values": int(torch.unique(codes[torch.isfinite(codes)]).numel()),
        "NaN codes": int(torch.isnan(codes).sum()),
        "inf codes": int(torch.isinf(codes).sum()),
        "range (binades)": math.log2(f.max / f.smallest_subnormal),
    }


def cast_behaviour(fmt: "str | FloatFormat", values: Sequence[float]) -> list[float]:
    """What a plain ``.to(torch.float8_*)`` makes of each value, measured (it varies across versions)."""
    return torch.tensor(list(values), dtype=torch.float32).to(fp8_format(fmt).dtype).float().tolist()

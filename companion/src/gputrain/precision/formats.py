"""The binary formats a GPU trains in: a sign bit, exponent bits (range), mantissa bits (precision) (chapter 7)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format: 1 sign bit, ``exponent_bits``, ``mantissa_bits``.

    ``dtype`` is the torch dtype that stores it (``None`` for TF32, which only
    exists inside tensor cores).  ``saturates``: out-of-range values become
    ``±max`` instead of ``±inf`` (FP8 E4M3 has no infinity; its top exponent
    holds numbers, all but one bit pattern, which is NaN).
    """

    name: str
    exponent_bits: int
    mantissa_bits: int
    dtype: Optional[torch.dtype]
    saturates: bool = False

    @property
    def bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def max_exponent(self) -> int:
        """Exponent of the largest finite value (IEEE formats reserve the top code for inf/NaN)."""
        top = 2**self.exponent_bits - 1 - self.bias
        return top if self.saturates else top - 1

    @property
    def max(self) -> float:
        # E4M3: the top exponent keeps its numbers except mantissa 111 (NaN) -> 1.75 * 2^8 = 448
        top_mantissa = 2 - 2.0 ** (1 - self.mantissa_bits) if self.saturates else 2 - 2.0**-self.mantissa_bits
        return top_mantissa * 2.0**self.max_exponent

    @property
    def smallest_normal(self) -> float:
        return 2.0 ** (1 - self.bias)

    @property
    def smallest_subnormal(self) -> float:
        return 2.0 ** (1 - self.bias - self.mantissa_bits)

    @property
    def eps(self) -> float:
        """Machine epsilon: the gap between 1.0 and the next representable number."""
        return 2.0**-self.mantissa_bits

    def describe(self) -> dict[str, object]:
        return {
            "format": self.name,
            "bits": self.bits,
            "sign": 1,
            "exponent": self.exponent_bits,
            "mantissa": self.mantissa_bits,
            "max": self.max,
            "smallest normal": self.smallest_normal,
            "smallest subnormal": self.smallest_subnormal,
            "eps": self.eps,
        }


FORMATS: dict[str, FloatFormat] = {
    f.name: f
    for f in (
        FloatFormat("fp32", 8, 23, torch.float32),
        FloatFormat("tf32", 8, 10, None),  # FP32's range, FP16's precision; tensor cores only
        FloatFormat("fp16", 5, 10, torch.float16),
        FloatFormat("bf16", 8, 7, torch.bfloat16),
        FloatFormat("fp8_e4m3", 4, 3, torch.float8_e4m3fn, saturates=True),
        FloatFormat("fp8_e5m2", 5, 2, torch.float8_e5m2),
    )
}
_ALIASES = {
    "float32": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "e4m3": "fp8_e4m3",
    "e5m2": "fp8_e5m2",
    "float8_e4m3fn": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2",
}


def get_format(fmt: "str | FloatFormat") -> FloatFormat:
    """Look a format up by name (``"bf16"``, ``"fp8_e4m3"``, ``"e5m2"``, ``"half"``...)."""
    if isinstance(fmt, FloatFormat):
        return fmt
    key = _ALIASES.get(str(fmt).lower(), str(fmt).lower())
    if key not in FORMATS:
        raise ValueError(f"unknown float format {fmt!r}; use one of: {', '.join(FORMATS)}")
    return FORMATS[key]

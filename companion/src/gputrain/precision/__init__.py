"""Floating-point formats, rounding, loss scaling and master weights (chapter 7).

Every training number lives in some binary format: one sign bit, some
exponent bits (the *range*) and some mantissa bits (the *precision*).  This
package describes the formats a GPU trains in, rounds values to any of them
from scratch (checked against PyTorch's own casts in ``tests/test_precision.py``),
and implements the two tricks that make 16-bit training work: dynamic loss
scaling (:class:`DynamicLossScaler`, the from-scratch twin of
``torch.amp.GradScaler``) and FP32 master weights (:class:`MasterWeights`).
:class:`EmulatedBf16` computes bf16's numbers in FP32 on CPUs that have no
native bf16.

One mechanism per module.  Imports go one way, down this list: a module may
import those above it, never one below::

    formats    FloatFormat, the FORMATS table, get_format
       |
    rounding   round_to_format, bit_fields
    scaling    DynamicLossScaler                        (imports no sibling)
    master     MasterWeights                            (imports no sibling)
    emulated   EmulatedBf16, bf16_values                (imports no sibling)

Every name is re-exported here, so ``from gputrain.precision import get_format``
and ``gputrain.precision.EmulatedBf16`` work as they always did.
"""

from .emulated import EmulatedBf16, bf16_values
from .formats import FORMATS, FloatFormat, get_format
from .master import MasterWeights
from .rounding import bit_fields, round_to_format
from .scaling import DynamicLossScaler

__all__ = [
    # formats
    "FloatFormat",
    "FORMATS",
    "get_format",
    # rounding
    "round_to_format",
    "bit_fields",
    # scaling
    "DynamicLossScaler",
    # master
    "MasterWeights",
    # emulated
    "bf16_values",
    "EmulatedBf16",
]

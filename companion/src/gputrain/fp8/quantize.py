"""Scaling granularities: one FP32 scale per tensor, row, 1x128 tile or 128x128 block (chapter 10, part 2).

:func:`quantize` computes each group's scale online from its max-abs, as
DeepSeek-V3 does; :func:`transpose` reuses the codes where the scales allow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .formats import TILE, _check_granularity, fp8_format


@dataclass
class Quantized:
    """An FP8 tensor and the FP32 factors that turn it back into numbers: ``x ≈ data * scale``.

    ``scale`` has one entry per group: shape ``()`` for ``"tensor"``, ``(R, 1)``
    for ``"row"``, ``(R, ceil(C/128))`` for ``"tile"``, ``(ceil(R/128),
    ceil(C/128))`` for ``"block"``, where ``(R, C)`` is the input seen as a
    matrix (leading dimensions flattened, the last one is the inner dimension).
    """

    data: torch.Tensor  # (R, C) FP8 codes
    scale: torch.Tensor  # float32 dequantization factors, one per group
    fmt: str
    granularity: str
    shape: torch.Size  # the original shape
    block: int = TILE


def _grouped(x2: torch.Tensor, granularity: str, block: int) -> torch.Tensor:
    """``x2`` (R, C) viewed so that every group spans its own axes (no copy unless an edge is ragged).

    tensor, row: (R, C); tile: (R, Cb, block); block: (Rb, block, Cb, block).
    Ragged edges are padded with zeros, which never raise a max-abs.
    """
    if granularity in ("tensor", "row"):
        return x2
    R, C = x2.shape
    cb, rb = -(-C // block), -(-R // block)
    if granularity == "tile":
        return (F.pad(x2, (0, cb * block - C)) if C % block else x2).reshape(R, cb, block)
    ragged = C % block or R % block
    return (F.pad(x2, (0, cb * block - C, 0, rb * block - R)) if ragged else x2).reshape(rb, block, cb, block)


def _ungrouped(g: torch.Tensor, granularity: str, R: int, C: int) -> torch.Tensor:
    """Back from :func:`_grouped` to (R, C), dropping the padding."""
    if granularity in ("tensor", "row"):
        return g
    # explicit sizes, not -1: a reshape cannot infer a size when there are no elements (an empty batch)
    if granularity == "tile":
        return g.reshape(R, g.shape[1] * g.shape[2])[:, :C]
    return g.reshape(g.shape[0] * g.shape[1], g.shape[2] * g.shape[3])[:R, :C]


def _per_group(scale: torch.Tensor, granularity: str) -> torch.Tensor:
    """The stored scales shaped to broadcast against :func:`_grouped`."""
    return {"tile": lambda s: s[:, :, None], "block": lambda s: s[:, None, :, None]}.get(granularity, lambda s: s)(
        scale
    )


_GROUP_DIMS = {"row": (1,), "tile": (2,), "block": (1, 3)}


def _group_amax(g: torch.Tensor, granularity: str) -> torch.Tensor:
    """Max-abs of each group of a :func:`_grouped` tensor: () / (R,) / (R, Cb) / (Rb, Cb).

    A group with no entries (an empty batch: zero rows) has max-abs 0; torch's
    ``amax`` refuses to reduce over nothing.
    """
    dims = tuple(range(g.dim())) if granularity == "tensor" else _GROUP_DIMS[granularity]
    if g.numel() == 0:
        return g.new_zeros([n for i, n in enumerate(g.shape) if i not in dims])
    return g.abs().amax(dim=dims)


def quantize(
    x: torch.Tensor, fmt: str = "e4m3", granularity: str = "tensor", *, block: int = TILE, pow2_scale: bool = False
) -> Quantized:
    """Scale each group of ``x`` so its max-abs lands on the format's max, then round to FP8 (chapter 10).

    Scales are computed online from the current values (no history).  An
    all-zero group gets scale 1 (no 0/0).  ``pow2_scale`` rounds each scale up
    to a power of two, so scaling itself adds no rounding error.  Shapes that
    are not multiples of ``block`` keep a smaller last tile or block (zero
    padding while the max is taken).  Values are clamped to ±max before the
    cast, so the result does not depend on how a torch version casts
    out-of-range values.  Non-finite inputs make their whole group NaN (a
    training step sees it and skips).
    """
    f = fp8_format(fmt)
    _check_granularity(granularity)
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    shape = x.shape
    rows, cols = (math.prod(shape[:-1]), shape[-1]) if x.dim() else (1, 1)
    x2 = x.detach().float().reshape(rows, cols)  # (R, C): the last dim is the inner one; R may be 0
    g = _grouped(x2, granularity, block)
    scale = _group_amax(g, granularity) / f.max  # () / (R,) / (R, Cb) / (Rb, Cb)
    if pow2_scale:
        scale = torch.exp2(torch.ceil(torch.log2(scale)))
    # all-zero group (or underflow): 1; a NaN or inf scale stays, so its whole group dequantizes to NaN
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    if granularity == "row":
        scale = scale[:, None]  # (R, 1)
    codes = (g / _per_group(scale, granularity)).clamp(-f.max, f.max).to(f.dtype)
    data = _ungrouped(codes, granularity, *x2.shape).contiguous()  # (R, C), row-major for the GEMM
    return Quantized(data, scale, "e4m3" if f.exponent_bits == 4 else "e5m2", granularity, shape, block)


def dequantize(q: Quantized, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``data * scale`` in ``dtype``, in the original shape."""
    return dequantize_2d(q).reshape(q.shape).to(dtype)


def dequantize_2d(q: Quantized) -> torch.Tensor:
    """The FP32 values of ``q`` as the (R, C) matrix its codes are stored as."""
    g = _grouped(q.data.float(), q.granularity, q.block)
    return _ungrouped(g * _per_group(q.scale, q.granularity), q.granularity, *q.data.shape)


def fake_quantize(x: torch.Tensor, fmt: str = "e4m3", granularity: str = "tensor", **kwargs) -> torch.Tensor:
    """``dequantize(quantize(x))`` in ``x``'s dtype: the values an FP8 GEMM would really multiply."""
    return dequantize(quantize(x, fmt, granularity, **kwargs), x.dtype if x.is_floating_point() else torch.float32)


def quantization_error(x: torch.Tensor, fmt: str = "e4m3", granularity: str = "tensor", **kwargs) -> float:
    """Relative error ``‖x̂ − x‖ / ‖x‖`` of an FP8 round trip (Frobenius norms, in FP64)."""
    x64 = x.detach().double()
    err = fake_quantize(x.detach().float(), fmt, granularity, **kwargs).double() - x64
    return float(err.norm() / x64.norm().clamp_min(torch.finfo(torch.float64).tiny))


def flushed_fraction(x: torch.Tensor, fmt: str = "e4m3", granularity: str = "tensor", **kwargs) -> float:
    """Share of the nonzero entries of ``x`` that come back from an FP8 round trip as exactly zero."""
    x = x.detach().float()
    nonzero = x != 0
    back = fake_quantize(x, fmt, granularity, **kwargs)
    return float(((back == 0) & nonzero).sum() / nonzero.sum().clamp_min(1))


def transpose(q: Quantized) -> Quantized:
    """The quantized transpose, reusing codes and scales: possible for tensor scales and square blocks.

    This is why DeepSeek-V3 scales weights in 128x128 blocks: the backward
    pass multiplies by W^T, and a block's scale serves both orientations,
    while a row's scale (or a 1x128 tile's) would run along the wrong axis.
    """
    if q.granularity not in ("tensor", "block") or q.data.dim() != 2 or len(q.shape) != 2:
        raise ValueError(
            f"a {q.granularity}-scaled tensor cannot be transposed in FP8 (its scales run along "
            "one axis); quantize the transpose instead"
        )
    scale = q.scale if q.granularity == "tensor" else q.scale.t().contiguous()
    return Quantized(q.data.t().contiguous(), scale, q.fmt, q.granularity, q.data.t().shape, q.block)

"""One FP8 matrix product, by the kernel where it is fast and by the emulation elsewhere (chapter 10)."""

from __future__ import annotations

from typing import Optional

import torch

from .probe import FUSED, emulates
from .products import emulated_product, kernel_product
from .quantize import Quantized, quantize


def scaled_matmul(
    qa: Quantized, qb: Quantized, *, emulate: Optional[bool] = None, align: Optional[int] = None
) -> torch.Tensor:
    """``a @ b.T`` from FP8 operands ``qa`` (R, K) and ``qb`` (N, K), both scaled along K; FP32 (R, N).

    Tensor or row scales on both sides: one ``torch._scaled_mm``
    (:func:`~gputrain.fp8.products.kernel_product`, ``align`` pads for it).
    Tiles or blocks (DeepSeek-V3's recipe), or ``emulate``: an FP32 product
    of the dequantized operands, the same FP8 values the fused kernel
    multiplies, added in FP32 as it does every 128.  ``emulate=None`` takes
    the kernel where it is fast (:func:`~gputrain.fp8.probe.emulates`).
    """
    if qa.data.shape[1] != qb.data.shape[1]:
        raise ValueError(f"inner dimensions differ: {tuple(qa.data.shape)} @ {tuple(qb.data.shape)}^T")
    if 0 in (*qa.data.shape, qb.data.shape[0]):  # an empty batch: no GEMM to launch, a sum of no products is 0
        return qa.data.new_zeros(qa.data.shape[0], qb.data.shape[0], dtype=torch.float32)  # (R, N)
    fused = {qa.granularity, qb.granularity} <= set(FUSED) and qa.granularity == qb.granularity
    if emulate is None:
        emulate = emulates(qa.granularity, qa.data.device.type)
    if emulate or not fused:
        return emulated_product(qa, qb)  # (R, N)
    return kernel_product(qa, qb, align)  # (R, N)


def fp8_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    a_fmt: str = "e4m3",
    b_fmt: str = "e4m3",
    granularity: str = "tensor",
    b_is_weight: bool = False,
    emulate: Optional[bool] = None,
    align: Optional[int] = None,
) -> torch.Tensor:
    """``a @ b.T`` for ``a`` (R, K) and ``b`` (N, K), both rounded to FP8 along K; FP32 (R, N).

    ``granularity``: ``"tensor"`` or ``"row"`` scales on both operands, or
    ``"block"`` for DeepSeek-V3's recipe: 1x128 tiles for activations and
    gradients, 128x128 blocks when ``b`` is a weight.  See :func:`scaled_matmul`.
    """
    if granularity not in ("tensor", "row", "block"):
        raise ValueError(
            f"unknown FP8 GEMM granularity {granularity!r}; use 'tensor', 'row' or 'block' "
            "(DeepSeek-V3's 1x128 tiles and 128x128 blocks)"
        )
    a_gran = "tile" if granularity == "block" else granularity
    b_gran = ("block" if b_is_weight else "tile") if granularity == "block" else granularity
    return scaled_matmul(quantize(a, a_fmt, a_gran), quantize(b, b_fmt, b_gran), emulate=emulate, align=align)

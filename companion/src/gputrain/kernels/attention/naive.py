"""Attention the eager way: four kernels per head, with the (T, T) scores written to memory and read back."""

from __future__ import annotations

from typing import Optional

import torch

from ..checks import check_block
from ..launch import launch, next_power_of_2, tl, triton
from ..matmul import matmul
from ..softmax import softmax
from ..traffic import Traffic, count_read, count_write, counter_args
from .flash import _check

NAIVE_BLOCK = 32  # the naive path's matmul tiles (BM = BN = BK)


@triton.jit
def scale_mask_kernel(
    s_ptr, out_ptr, T, scale, counter, CAUSAL: tl.constexpr, BLOCK: tl.constexpr, IN_BYTES: tl.constexpr,
    OUT_BYTES: tl.constexpr, COUNT: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)  # one row of the (T, T) scores per program
    cols = tl.arange(0, BLOCK)
    mask = cols < T
    x = tl.load(s_ptr + row * T + cols, mask=mask, other=0.0) * scale
    if CAUSAL:
        x = tl.where(cols <= row, x, -float("inf"))  # the future gets probability exp(-inf) = 0
    tl.store(out_ptr + row * T + cols, x.to(out_ptr.dtype.element_ty), mask=mask)
    if COUNT:
        count_read(counter, mask, IN_BYTES)
        count_write(counter, mask, OUT_BYTES)


def _scale_mask(s: torch.Tensor, scale: float, causal: bool, dtype: torch.dtype, counter, count) -> torch.Tensor:
    """``s · scale``, causal: with -inf above the diagonal; (T, T) fp32 in, (T, T) of ``dtype`` out."""
    t = s.shape[0]
    out = torch.empty(t, t, dtype=dtype, device=s.device)
    launch(
        scale_mask_kernel, (t,), s, out, t, scale, counter, CAUSAL=causal, BLOCK=next_power_of_2(t),
        IN_BYTES=s.element_size(), OUT_BYTES=out.element_size(), COUNT=count,
    )  # fmt: skip
    return out


def naive_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: Optional[float] = None,
    block: int = NAIVE_BLOCK,
    traffic: Optional[Traffic] = None,
) -> torch.Tensor:
    """The same attention, unfused: four kernels per head, and the (T, T) scores pass through memory.

    Per (batch, head): ``S = q @ k^T`` by :func:`~.matmul.matmul` (fp32, tiles of
    ``block``), one kernel scales and causally masks S into q's dtype, the fused
    :func:`~.softmax.softmax` turns it into P, and ``P @ v`` is a second matmul.
    Forward only.  Placing each head's (fp32) result into the output is a torch
    copy, not counted.
    """
    b, h, t, d, scale = _check(q, k, v, scale)
    check_block("block", block, minimum=16, maximum=256)
    out = torch.empty_like(q)
    counter, count = counter_args(traffic, q.device)
    tiles = (block, block, block)
    for i in range(b):
        for j in range(h):
            if not t:
                continue
            s = matmul(q[i, j], k[i, j], b_transposed=True, block=tiles, traffic=traffic)  # (T, T) fp32 scores
            p = softmax(_scale_mask(s, scale, bool(causal), q.dtype, counter, count), traffic=traffic)  # (T, T)
            out[i, j] = matmul(p, v[i, j], block=tiles, traffic=traffic)  # (T, D)
    return out

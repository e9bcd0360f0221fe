"""FlashAttention as an autograd function: input checks, the forward kernel, and the three backward kernels."""

from __future__ import annotations

import math
from typing import Optional

import torch

from ..checks import KernelInputError, check_block, check_tensor
from ..launch import cdiv, interpreted, launch
from ..traffic import Traffic, counter_args
from .backward import flash_delta_kernel, flash_dkdv_kernel, flash_dq_kernel
from .forward import flash_fwd_kernel

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
HEAD_DIMS = (16, 32, 64, 128)  # a whole head row is one block; tl.dot needs at least 16


def _check(q, k, v, scale) -> tuple[int, int, int, int, float]:
    """Shapes, dtypes, devices and the scale; returns (B, H, T, D, scale)."""
    check_tensor("q", q, dtypes=FLOAT_DTYPES, ndim=4)
    for name, t in (("k", k), ("v", v)):
        check_tensor(name, t, dtypes=(q.dtype,), ndim=4)
        if t.shape != q.shape:
            raise KernelInputError(
                f"q, k and v must share one shape (B, H, T, D); q is {tuple(q.shape)} but {name} is {tuple(t.shape)}"
            )
    b, h, t, d = q.shape
    if d not in HEAD_DIMS:
        raise KernelInputError(f"head dimension {d} is not supported; the kernels take D in {HEAD_DIMS}")
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise KernelInputError(f"scale must be a finite number (default 1/sqrt(D)), got {scale!r}")
    return b, h, t, d, float(scale)


def _meta(q: torch.Tensor, traffic: Optional[Traffic]) -> tuple[torch.Tensor, dict]:
    counter, count = counter_args(traffic, q.device)
    precision = "ieee" if q.dtype == torch.float32 else "tf32"  # fp32 in full precision, like torch's default
    return counter, dict(UPCAST=interpreted(), PRECISION=precision, ELEM_BYTES=q.element_size(), COUNT=count)


class FlashAttention(torch.autograd.Function):
    """FlashAttention as an autograd node: the forward kernel, and the three backward kernels in ``backward``."""

    @staticmethod
    def forward(ctx, q, k, v, causal: bool, scale, block_m: int, block_n: int, traffic: Optional[Traffic]):
        """The forward kernel; saves Q, K, V, O and one log-sum-exp per row for the backward pass."""
        b, h, t, d, scale = _check(q, k, v, scale)
        bm, bn = (
            check_block(name, x, minimum=16, maximum=256) for name, x in (("block_m", block_m), ("block_n", block_n))
        )
        o = torch.empty_like(q)
        lse = torch.empty(b, h, t, dtype=torch.float32, device=q.device)  # log-sum-exp of each row of scores
        if q.numel():
            counter, meta = _meta(q, traffic)
            launch(
                flash_fwd_kernel, (cdiv(t, bm), b * h), q, k, v, o, lse, t, scale, counter,
                D=d, BM=bm, BN=bn, CAUSAL=bool(causal), **meta,
            )  # fmt: skip
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.args = (b, h, t, d, bool(causal), scale, bm, bn, traffic)
        return o

    @staticmethod
    def backward(ctx, do):
        """Delta = rowsum(dO * O), then dK and dV per key block and dQ per query block, P recomputed from the LSE."""
        q, k, v, o, lse = ctx.saved_tensors
        b, h, t, d, causal, scale, bm, bn, traffic = ctx.args
        do = do.contiguous()
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        if not q.numel():
            return dq, dk, dv, None, None, None, None, None
        counter, meta = _meta(q, traffic)
        delta = torch.empty_like(lse)  # rowsum(dO ∘ O), (B, H, T) fp32
        launch(
            flash_delta_kernel, (cdiv(t, bm), b * h), o, do, delta, t, counter,
            D=d, BM=bm, ELEM_BYTES=meta["ELEM_BYTES"], COUNT=meta["COUNT"],
        )  # fmt: skip
        shared = dict(D=d, BM=bm, BN=bn, CAUSAL=causal, **meta)
        launch(flash_dkdv_kernel, (cdiv(t, bn), b * h), q, k, v, do, lse, delta, dk, dv, t, scale, counter, **shared)
        launch(flash_dq_kernel, (cdiv(t, bm), b * h), q, k, v, do, lse, delta, dq, t, scale, counter, **shared)
        return dq, dk, dv, None, None, None, None, None


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: Optional[float] = None,
    block_m: int = 32,
    block_n: int = 32,
    traffic: Optional[Traffic] = None,
) -> torch.Tensor:
    """``softmax(q k^T · scale) v`` for q, k, v of shape (B, H, T, D), fused; differentiable.

    One program per (batch·head, block of ``block_m`` queries) walks over K and V
    in blocks of ``block_n`` keys with an online softmax (module docstring).
    ``scale`` defaults to 1/sqrt(D), as in ``F.scaled_dot_product_attention``;
    ``causal=True`` lets query t see keys <= t.  With ``traffic``, the forward
    counts its bytes and so does the backward when it runs (same counter).
    """
    return FlashAttention.apply(q, k, v, causal, scale, block_m, block_n, traffic)

"""FlashAttention, forward and backward, against attention that writes its scores to memory (chapter 11).

Attention is ``softmax(Q K^T · scale) V`` per (batch, head), with Q, K, V of
shape (T, D).  :func:`naive_attention` computes it the way eager code does:
the (T, T) scores go to memory, come back to be scaled and masked, go back,
come back for the softmax, go back as probabilities, and come back once more
for the product with V.  Every one of those passes moves T² numbers.

:func:`flash_attention` never lets a (T, T) matrix leave the chip.  One
program owns a block of ``block_m`` queries and walks over K and V in blocks
of ``block_n`` keys, keeping an *online softmax*: a running row max ``m``, a
running sum ``l`` of exponentials, and an output accumulator that is rescaled
by ``exp(m_old - m_new)`` whenever the max grows.  After the last block the
accumulator divided by ``l`` is the output, and ``m + log l`` (the
log-sum-exp of the row) is stored for the backward pass, T numbers per head.

The backward pass (FlashAttention-2's) recomputes the probabilities from Q,
K and the stored log-sum-exp instead of reading them: ``P = exp(Q K^T·scale -
lse)``.  With ``Delta = rowsum(dO ∘ O)`` (one small kernel), ``dS = P ∘ (dO
V^T - Delta)``; one kernel per block of keys accumulates ``dV += P^T dO`` and
``dK += dS^T Q · scale``, and a separate kernel per block of queries
accumulates ``dQ += dS K · scale`` (no atomics: the result is deterministic).

What is counted, exactly (:func:`flash_forward_bytes`, :func:`flash_backward_bytes`):
the forward reads Q once and K and V once *per block of queries* (causal:
only the key blocks up to the diagonal), and writes O and the fp32
log-sum-exp.  Its writes grow as T; its reads as T per block of queries, so
T²·D/block_m in all: the K/V re-reads, which a larger block (more on-chip
memory) divides.  The naive path's T² terms (:func:`naive_attention_bytes`)
are the scores and probabilities themselves, which no tile size removes.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from .checks import KernelInputError, check_block, check_sizes, check_tensor
from .launch import cdiv, interpreted, launch, next_power_of_2, tl, triton
from .matmul import matmul, tiled_read_bytes
from .softmax import softmax
from .traffic import Bytes, Traffic, count_read, count_write, counter_args

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
HEAD_DIMS = (16, 32, 64, 128)  # a whole head row is one block; tl.dot needs at least 16
NAIVE_BLOCK = 32  # the naive path's matmul tiles (BM = BN = BK)


@triton.jit
def flash_fwd_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, T, scale, counter,
    D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
    PRECISION: tl.constexpr, ELEM_BYTES: tl.constexpr, COUNT: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)  # this program owns queries pid_m*BM : +BM ...
    head = tl.program_id(1) * T * D  # ... of one (batch, head): a contiguous T x D slab
    rows = pid_m * BM + tl.arange(0, BM)  # (BM,)
    dims = tl.arange(0, D)  # (D,)
    q_mask = (rows[:, None] < T) & (dims[None, :] < D)  # (BM, D): rows past T do not exist
    q = tl.load(q_ptr + head + rows[:, None] * D + dims[None, :], mask=q_mask, other=0.0)
    if UPCAST:  # the interpreter's tl.dot multiplies bf16 bit patterns, not values
        q = q.to(tl.float32)
    m = tl.full((BM,), -float("inf"), tl.float32)  # running row max
    den = tl.zeros((BM,), tl.float32)  # running sum of exp(s - m): the softmax's denominator (l in the papers)
    acc = tl.zeros((BM, D), tl.float32)  # running sum of exp(s - m) v
    hi = T
    if CAUSAL:  # keys past the block's last query are masked for every row: skip them
        hi = tl.minimum((pid_m + 1) * BM, T)
    for n0 in range(0, hi, BN):
        cols = n0 + tl.arange(0, BN)  # (BN,) key positions
        kv_mask = (cols[:, None] < T) & (dims[None, :] < D)  # (BN, D)
        k = tl.load(k_ptr + head + cols[:, None] * D + dims[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + head + cols[:, None] * D + dims[None, :], mask=kv_mask, other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale  # (BM, BN) scores, on chip only
        keep = cols[None, :] < T  # (1, BN): keys past T do not exist
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        s = tl.where(keep, s, -float("inf"))  # key 0 is kept in every row, so m is finite after block 0
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)  # how much the old terms shrink under the new max
        p = tl.exp(s - m_new[:, None])  # (BM, BN)
        den = den * alpha + tl.sum(p, axis=1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)
        m = m_new
        if COUNT:
            count_read(counter, kv_mask, 2 * ELEM_BYTES)  # K and V
    tl.store(
        o_ptr + head + rows[:, None] * D + dims[None, :], (acc / den[:, None]).to(o_ptr.dtype.element_ty), mask=q_mask
    )
    tl.store(lse_ptr + tl.program_id(1) * T + rows, m + tl.log(den), mask=rows < T)
    if COUNT:
        count_read(counter, q_mask, ELEM_BYTES)
        count_write(counter, q_mask, ELEM_BYTES)
        count_write(counter, rows < T, 4)  # the fp32 log-sum-exp


@triton.jit
def flash_delta_kernel(
    o_ptr, do_ptr, delta_ptr, T, counter, D: tl.constexpr, BM: tl.constexpr, ELEM_BYTES: tl.constexpr,
    COUNT: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    dims = tl.arange(0, D)
    mask = (rows[:, None] < T) & (dims[None, :] < D)
    offs = tl.program_id(1) * T * D + rows[:, None] * D + dims[None, :]
    o = tl.load(o_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    do = tl.load(do_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(delta_ptr + tl.program_id(1) * T + rows, tl.sum(o * do, axis=1), mask=rows < T)  # rowsum(dO ∘ O)
    if COUNT:
        count_read(counter, mask, 2 * ELEM_BYTES)
        count_write(counter, rows < T, 4)


@triton.jit
def _probs(q, k, lse, rows, cols, T, scale, CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    """P = exp(Q K^T · scale - lse) for one (BM, BN) block, recomputed; 0 where masked."""
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
    keep = (rows[:, None] < T) & (cols[None, :] < T)
    if CAUSAL:
        keep = keep & (cols[None, :] <= rows[:, None])
    return tl.exp(tl.where(keep, s, -float("inf")) - lse[:, None])


@triton.jit
def flash_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, T, scale, counter,
    D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
    PRECISION: tl.constexpr, ELEM_BYTES: tl.constexpr, COUNT: tl.constexpr,
):  # fmt: skip
    pid_n = tl.program_id(0)  # this program owns keys pid_n*BN : +BN and walks over the queries
    head = tl.program_id(1) * T * D
    stats = tl.program_id(1) * T  # lse and Delta: one fp32 per row
    cols = pid_n * BN + tl.arange(0, BN)
    dims = tl.arange(0, D)
    kv_mask = (cols[:, None] < T) & (dims[None, :] < D)
    k = tl.load(k_ptr + head + cols[:, None] * D + dims[None, :], mask=kv_mask, other=0.0)
    v = tl.load(v_ptr + head + cols[:, None] * D + dims[None, :], mask=kv_mask, other=0.0)
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    dk = tl.zeros((BN, D), tl.float32)
    dv = tl.zeros((BN, D), tl.float32)
    lo = 0
    if CAUSAL:  # queries before this block's first key see none of it
        lo = (pid_n * BN // BM) * BM
    for m0 in range(lo, T, BM):
        rows = m0 + tl.arange(0, BM)
        q_mask = (rows[:, None] < T) & (dims[None, :] < D)
        q = tl.load(q_ptr + head + rows[:, None] * D + dims[None, :], mask=q_mask, other=0.0)
        do = tl.load(do_ptr + head + rows[:, None] * D + dims[None, :], mask=q_mask, other=0.0)
        lse = tl.load(lse_ptr + stats + rows, mask=rows < T, other=0.0)
        delta = tl.load(delta_ptr + stats + rows, mask=rows < T, other=0.0)
        if UPCAST:
            q = q.to(tl.float32)
            do = do.to(tl.float32)
        p = _probs(q, k, lse, rows, cols, T, scale, CAUSAL, PRECISION)  # (BM, BN)
        dv = tl.dot(tl.trans(p.to(do.dtype)), do, dv, input_precision=PRECISION)  # (BN, D)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)  # (BM, BN)
        ds = p * (dp - delta[:, None])  # the softmax's backward, row by row
        dk = tl.dot(tl.trans(ds.to(q.dtype)), q, dk, input_precision=PRECISION)  # (BN, D)
        if COUNT:
            count_read(counter, q_mask, 2 * ELEM_BYTES)  # Q and dO
            count_read(counter, rows < T, 2 * 4)  # lse and Delta
    tl.store(dk_ptr + head + cols[:, None] * D + dims[None, :], (dk * scale).to(dk_ptr.dtype.element_ty), mask=kv_mask)
    tl.store(dv_ptr + head + cols[:, None] * D + dims[None, :], dv.to(dv_ptr.dtype.element_ty), mask=kv_mask)
    if COUNT:
        count_read(counter, kv_mask, 2 * ELEM_BYTES)
        count_write(counter, kv_mask, 2 * ELEM_BYTES)


@triton.jit
def flash_dq_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, T, scale, counter,
    D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
    PRECISION: tl.constexpr, ELEM_BYTES: tl.constexpr, COUNT: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)  # this program owns queries pid_m*BM : +BM and walks over the keys
    head = tl.program_id(1) * T * D
    rows = pid_m * BM + tl.arange(0, BM)
    dims = tl.arange(0, D)
    q_mask = (rows[:, None] < T) & (dims[None, :] < D)
    q = tl.load(q_ptr + head + rows[:, None] * D + dims[None, :], mask=q_mask, other=0.0)
    do = tl.load(do_ptr + head + rows[:, None] * D + dims[None, :], mask=q_mask, other=0.0)
    lse = tl.load(lse_ptr + tl.program_id(1) * T + rows, mask=rows < T, other=0.0)
    delta = tl.load(delta_ptr + tl.program_id(1) * T + rows, mask=rows < T, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
        do = do.to(tl.float32)
    dq = tl.zeros((BM, D), tl.float32)
    hi = T
    if CAUSAL:
        hi = tl.minimum((pid_m + 1) * BM, T)
    for n0 in range(0, hi, BN):
        cols = n0 + tl.arange(0, BN)
        kv_mask = (cols[:, None] < T) & (dims[None, :] < D)
        k = tl.load(k_ptr + head + cols[:, None] * D + dims[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + head + cols[:, None] * D + dims[None, :], mask=kv_mask, other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        p = _probs(q, k, lse, rows, cols, T, scale, CAUSAL, PRECISION)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=PRECISION)  # (BM, D)
        if COUNT:
            count_read(counter, kv_mask, 2 * ELEM_BYTES)
    tl.store(dq_ptr + head + rows[:, None] * D + dims[None, :], (dq * scale).to(dq_ptr.dtype.element_ty), mask=q_mask)
    if COUNT:
        count_read(counter, q_mask, 2 * ELEM_BYTES)  # Q and dO
        count_read(counter, rows < T, 2 * 4)  # lse and Delta
        count_write(counter, q_mask, ELEM_BYTES)


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


# --- wrappers ---------------------------------------------------------------------------------------


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


# --- the bytes each path requests, by formula (tests hold the counters to these) ---------------------


def _check_formula_sizes(b: int, h: int, t: int, d: int, itemsize: int, **blocks: int) -> None:
    """The shape may be empty (0 bytes); a block or an item size of 0 or less has no meaning (and divides by 0)."""
    check_sizes(0, b=b, h=h, t=t, d=d)
    check_sizes(itemsize=itemsize, **blocks)


def kv_rows_read(t: int, block_m: int, block_n: int, causal: bool) -> int:
    """Rows of K (and of V) one head's query blocks load in all: every key per block, causal: up to the diagonal."""
    total = 0
    for i in range(cdiv(t, block_m)):
        hi = min((i + 1) * block_m, t) if causal else t
        total += min(cdiv(hi, block_n) * block_n, t)  # whole key blocks, the last one masked at T
    return total


def q_rows_read(t: int, block_m: int, block_n: int, causal: bool) -> int:
    """Rows of Q (and dO) one head's key blocks load in the dK/dV kernel; causal: from the diagonal's query block."""
    return sum(t - ((j * block_n // block_m) * block_m if causal else 0) for j in range(cdiv(t, block_n)))


def flash_forward_bytes(
    b: int, h: int, t: int, d: int, block_m: int, block_n: int, itemsize: int = 4, causal: bool = False
) -> Bytes:
    """Bytes the forward kernel requests: Q once, K and V once per query block; O and the fp32 log-sum-exp out."""
    _check_formula_sizes(b, h, t, d, itemsize, block_m=block_m, block_n=block_n)
    read = itemsize * d * (t + 2 * kv_rows_read(t, block_m, block_n, causal))
    written = itemsize * t * d + 4 * t
    return Bytes(b * h * read, b * h * written)


def flash_backward_bytes(
    b: int, h: int, t: int, d: int, block_m: int, block_n: int, itemsize: int = 4, causal: bool = False
) -> Bytes:
    """Bytes of the three backward kernels: Delta = rowsum(dO ∘ O), then dK and dV per key block, dQ per query block."""
    _check_formula_sizes(b, h, t, d, itemsize, block_m=block_m, block_n=block_n)
    row = itemsize * d  # one row of Q, K, V, O, dO or a gradient
    delta = Bytes(2 * row * t, 4 * t)  # O and dO in, Delta out
    dkdv = Bytes(2 * row * t + (2 * row + 8) * q_rows_read(t, block_m, block_n, causal), 2 * row * t)
    dq = Bytes((2 * row + 8) * t + 2 * row * kv_rows_read(t, block_m, block_n, causal), row * t)
    read, written = (sum(getattr(x, f) for x in (delta, dkdv, dq)) for f in ("read", "written"))
    return Bytes(b * h * read, b * h * written)


def naive_attention_bytes(b: int, h: int, t: int, d: int, itemsize: int = 4, block: int = NAIVE_BLOCK) -> Bytes:
    """Bytes of :func:`naive_attention`: two tiled matmuls, and the (T, T) scores written and read three times."""
    _check_formula_sizes(b, h, t, d, itemsize, block=block)
    read = (
        tiled_read_bytes(t, t, d, block, block, itemsize)  # S = Q K^T
        + 4 * t * t  # scale and mask read the fp32 scores
        + itemsize * t * t  # softmax reads them
        + tiled_read_bytes(t, d, t, block, block, itemsize)  # P V: P is read once per column block of the output
    )
    written = 4 * t * t + 2 * itemsize * t * t + 4 * t * d  # S (fp32), masked S, P, the fp32 output
    return Bytes(b * h * read, b * h * written)

"""FlashAttention-2's backward kernels: Delta = rowsum(dO * O), dK and dV per key block, dQ per query block."""

from __future__ import annotations

from ..launch import tl, triton
from ..traffic import count_read, count_write


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

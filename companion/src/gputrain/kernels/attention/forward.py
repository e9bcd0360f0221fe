"""FlashAttention's forward kernel: one block of queries walks over K and V with an online softmax."""

from __future__ import annotations

from ..launch import tl, triton
from ..traffic import count_read, count_write


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

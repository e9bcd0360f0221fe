"""The bytes each attention path requests, by formula; the tests hold the kernels' counters to these."""

from __future__ import annotations

from ..checks import check_sizes
from ..launch import cdiv
from ..matmul import tiled_read_bytes
from ..traffic import Bytes
from .naive import NAIVE_BLOCK


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

"""FLOPs and bytes of the book's operations, one function each: products, elementwise, attention, AdamW, all-reduce."""

from __future__ import annotations

import math

from ..flops import ELEMENTWISE_FLOPS
from .cost import OpCost, _check_sizes


def matmul(m: int, k: int, n: int, itemsize: int = 2, bias: bool = False, name: str = "") -> OpCost:
    """``(m x k) @ (k x n)``, plus a bias row if ``bias``: ``2mkn`` FLOPs, A, B and C each crossing memory once."""
    _check_sizes(m=m, k=k, n=n, itemsize=itemsize)
    return OpCost(
        name=name or f"matmul {m}x{k} @ {k}x{n}",
        flops=2 * m * k * n + (m * n if bias else 0),
        bytes=itemsize * (m * k + k * n + m * n + (n if bias else 0)),
        rule="2mkn FLOPs (one multiply and one add per term); A and B read once, C written once",
    )


def add(n: int, itemsize: int = 4) -> OpCost:
    """``c = a + b`` on ``n`` elements: one FLOP per element against three elements of traffic."""
    _check_sizes(n=n, itemsize=itemsize)
    return OpCost(
        name=f"add of {n:,} elements",
        flops=n,
        bytes=3 * n * itemsize,
        rule="one add per element; a and b read, c written",
    )


def layernorm(rows: int, cols: int, itemsize: int = 4) -> OpCost:
    """LayerNorm over the last dimension in one fused pass: x read once, y written once, plus the gain and bias."""
    _check_sizes(rows=rows, cols=cols, itemsize=itemsize)
    per = ELEMENTWISE_FLOPS["native_layer_norm"]
    return OpCost(
        name=f"LayerNorm {rows}x{cols}",
        flops=per * rows * cols,
        bytes=itemsize * (2 * rows * cols + 2 * cols),
        rule=f"{per:g} FLOPs per element (mean, variance, normalize, scale, shift); x read, y written, "
        "gain and bias read",
    )


def gelu(n: int, itemsize: int = 4) -> OpCost:
    """GELU on ``n`` elements: a handful of FLOPs per element, one read and one write."""
    _check_sizes(n=n, itemsize=itemsize)
    per = ELEMENTWISE_FLOPS["gelu"]
    return OpCost(
        name=f"GELU of {n:,} elements",
        flops=per * n,
        bytes=2 * n * itemsize,
        rule=f"{per:g} FLOPs per element (the tanh form's polynomial and tanh); x read, y written",
    )


def softmax(rows: int, cols: int, itemsize: int = 4, fused: bool = True) -> OpCost:
    """Softmax along each of ``rows`` rows of ``cols``: fused, one read and one write per element.

    ``fused=False`` counts eager PyTorch's five separate passes (row max,
    subtract, exp, row sum, divide), each reading its inputs from memory and
    writing its result back: 8 elements of traffic per element, plus 4 per
    row for the two row statistics.
    """
    _check_sizes(rows=rows, cols=cols, itemsize=itemsize)
    per = ELEMENTWISE_FLOPS["_softmax"]
    elements = 2 * rows * cols if fused else 8 * rows * cols + 4 * rows
    how = (
        "x read once, y written once" if fused else "five passes: max, subtract, exp, sum, divide, each through memory"
    )
    return OpCost(
        name=f"softmax {rows}x{cols}" + ("" if fused else " (unfused)"),
        flops=per * rows * cols,
        bytes=itemsize * elements,
        rule=f"{per:g} FLOPs per element (max, subtract, exp, sum, divide); {how}",
    )


def _attention_flops(batch: int, heads: int, seq: int, head_dim: int) -> float:
    # two products of (T x d) by (d x T) and (T x T) by (T x d) per head, and the softmax of the T x T scores;
    # the full square, as torch's counter and chapter 2 count it (a causal kernel can skip half)
    return batch * heads * (4 * seq * seq * head_dim + ELEMENTWISE_FLOPS["_softmax"] * seq * seq)


def attention_naive(batch: int, heads: int, seq: int, head_dim: int, itemsize: int = 2) -> OpCost:
    """Attention forward in three kernels: S = QKᵀ, P = softmax(S), O = PV, with S and P stored in memory.

    Traffic per head: Q, K, V read and O written (4Td), the T x T scores
    written and read back, the probabilities written and read back (4T²).
    It grows as T².
    """
    _check_sizes(batch=batch, heads=heads, seq=seq, head_dim=head_dim, itemsize=itemsize)
    bh, t, d = batch * heads, seq, head_dim
    return OpCost(
        name=f"attention, naive (T={t}, d={d})",
        flops=_attention_flops(batch, heads, seq, head_dim),
        bytes=itemsize * bh * (4 * t * d + 4 * t * t),
        rule="4T²d + 5T² FLOPs per head; Q, K, V read, O written, scores and probabilities each written and read back",
        scratch=itemsize * bh * 2 * t * t,
    )


def attention_tiled(batch: int, heads: int, seq: int, head_dim: int, block: int = 64, itemsize: int = 2) -> OpCost:
    """FlashAttention's forward: scores stay on chip; each block of ``block`` queries streams all of K and V.

    Traffic per head: Q read and O written once (2Td), K and V read once per
    query block (2Td x ceil(T / block)).  For a fixed block that still grows
    as T², but by 2d / block elements per score where the naive version pays
    4, and nothing of size T x T is ever stored: what stays in memory is one
    fp32 log-sum-exp per row for the backward pass, which grows as T.
    """
    _check_sizes(batch=batch, heads=heads, seq=seq, head_dim=head_dim, block=block, itemsize=itemsize)
    bh, t, d = batch * heads, seq, head_dim
    q_blocks = math.ceil(t / block)
    return OpCost(
        name=f"attention, tiled (T={t}, d={d}, block={block})",
        flops=_attention_flops(batch, heads, seq, head_dim),
        bytes=itemsize * bh * (2 * t * d + 2 * t * d * q_blocks),
        rule=f"4T²d + 5T² FLOPs per head; Q read and O written once, K and V read once per block of {block} queries",
        scratch=4 * bh * t,
    )


# Per parameter, torch.optim.AdamW's update (bias corrections are per-tensor scalars):
# decay p *= 1 - lr*wd (1); m = b1*m + (1-b1)*g (3); v = b2*v + (1-b2)*g*g (4);
# denom = sqrt(v)/sqrt(c2) + eps (3); p -= (lr/c1) * m/denom (3).
ADAMW_FLOPS_PER_PARAM = 1 + 3 + 4 + 3 + 3


def adamw_step(n_params: int, itemsize: int = 4) -> OpCost:
    """One AdamW update of ``n_params`` fp32 parameters in one fused pass (chapter 11, "The roofline").

    Reads the parameter, its gradient and the two moments (16 bytes), writes
    the parameter and both moments back (12 bytes): 28 bytes per parameter
    for :data:`ADAMW_FLOPS_PER_PARAM` = 14 FLOPs, 0.5 FLOP per byte.
    """
    _check_sizes(n_params=n_params, itemsize=itemsize)
    return OpCost(
        name=f"AdamW step, {n_params:,} parameters",
        flops=ADAMW_FLOPS_PER_PARAM * n_params,
        bytes=(4 + 3) * itemsize * n_params,
        rule=(
            f"{ADAMW_FLOPS_PER_PARAM} FLOPs per parameter (decay 1, first moment 3, second moment 4, "
            "denominator 3, update 3); parameter, gradient and both moments read, all but the gradient written"
        ),
    )


def all_reduce(n_elements: int, ranks: int, itemsize: int = 4) -> OpCost:
    """Ring all-reduce of ``n_elements`` per rank (chapter 8): bytes each rank sends, and the additions it does.

    Reduce-scatter then all-gather: each rank sends 2(N - 1)/N of the buffer
    and adds (N - 1)/N of its elements, so the intensity is 1 / (2 x itemsize)
    FLOPs per byte sent, whatever N.  The roof that binds is the link, not
    the arithmetic.
    """
    _check_sizes(n_elements=n_elements, ranks=ranks, itemsize=itemsize)
    if ranks < 2:
        raise ValueError(f"an all-reduce needs at least 2 ranks, got ranks={ranks}")
    share = (ranks - 1) / ranks
    return OpCost(
        name=f"ring all-reduce, {n_elements:,} elements over {ranks} ranks",
        flops=share * n_elements,
        bytes=2 * share * n_elements * itemsize,
        rule="bytes sent per rank, 2(N-1)/N of the buffer; one add per element received in the reduce-scatter",
    )

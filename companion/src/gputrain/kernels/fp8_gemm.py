"""DeepSeek-V3's FP8 GEMM as a Triton kernel: block-scaled codes, FP32 promotion every 128 (chapter 11).

``C = A @ B^T`` with ``A`` (M, K) activations and ``B`` (N, K) weights, both as
FP8 codes made by :func:`gputrain.fp8.quantize` in torch (chapter 10):

* ``A`` per **1 x 128 tile**: one FP32 scale per row and per 128 columns of K,
  ``qa.scale`` of shape (M, ceil(K/128));
* ``B`` per **128 x 128 block**: ``qb.scale`` of shape (ceil(N/128), ceil(K/128)).

Each program owns a ``block_m`` x ``block_n`` tile of ``C`` and walks along K
in slices of exactly 128 (BK = 128 is fixed: a slice is one tile of ``A`` and
one block of ``B``).  For every slice it loads the FP8 codes, multiplies them
with ``tl.dot`` into a *fresh* FP32 partial sum (the tensor cores on a GPU),
then multiplies that partial sum by the slice's two scales (the activation
scale of each row, the weight scale of the program's column block) and adds it
into the FP32 accumulator held in registers.  That last step is the report's
*promotion*: a partial sum never runs longer than 128 products before it is
scaled and added at full FP32 precision.  ``block_n`` must divide 128 (a power
of two from 16 to 128), so all columns of a program lie in one weight block and
one scalar weight scale per slice serves them all.  Ragged M, N and K are
masked: padded codes load as zero and add nothing.

What the interpreter cannot show, and where to look instead:

* **the tensor cores' short accumulator.**  DeepSeek-V3 measured that H800's FP8
  tensor cores keep about 14 mantissa bits in the running sum.  The interpreter
  multiplies with NumPy in FP32 (or better), so on a CPU this kernel and a naive
  one agree to FP32 rounding; the loss that promotion prevents is invisible.
  Chapter 10 emulates it bit by bit with :func:`gputrain.fp8.limited_dot`.  On a
  Hopper GPU Triton's own ``max_num_imprecise_acc`` (default 2**30 on sm_90,
  i.e. never promote) lets a ``tl.dot`` that carries its accumulator across the
  K loop (like :mod:`.matmul`'s) keep it in the tensor core for all of K; this
  kernel starts a fresh ``tl.dot`` every 128 instead.
* **speed.**  The interpreter runs programs one after another; on a GPU the same
  source compiles to FP8 tensor-core instructions (Hopper: wgmma) and is timed
  against ``torch._scaled_mm`` by ``bench/gpu/kernels.py``.

Bytes requested (:func:`fp8_gemm_read_bytes`): the codes as in the tiled matmul
with one byte per element, plus per program and slice the ``block_m`` row scales
and one weight scale (4 bytes each), and 4 bytes per element of ``C`` written.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..fp8 import TILE, Quantized, quantize
from .checks import KernelInputError, check_block, check_matmul_shapes, check_sizes, check_tensor
from .launch import cdiv, interpreted, launch, tl, triton
from .matmul import FP8_DTYPES, tiled_read_bytes
from .traffic import Traffic, count_read, count_write, counter_args

SLICE = TILE  # DeepSeek-V3: 1x128 tiles, 128x128 blocks, promotion every 128 products
SCALE_BYTES = 4  # one FP32 scale


@triton.jit
def fp8_gemm_kernel(
    a_ptr, sa_ptr, b_ptr, sb_ptr, c_ptr, M, N, K, KT, counter,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, UPCAST: tl.constexpr, COUNT: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)  # this program computes C[pid_m*BM : +BM, pid_n*BN : +BN]
    pid_n = tl.program_id(1)
    rows = pid_m * BM + tl.arange(0, BM)  # (BM,) rows of A and C
    cols = pid_n * BN + tl.arange(0, BN)  # (BN,) rows of B, columns of C
    row_ok = rows < M
    col_ok = cols < N
    nb = (pid_n * BN) // BK  # the one weight block all BN columns fall in (BN divides BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)  # the FP32 accumulator, in registers
    for kt in range(0, KT):  # one 128-wide slice of K per step
        ks = kt * BK + tl.arange(0, BK)  # (BK,)
        a_mask = row_ok[:, None] & (ks[None, :] < K)  # (BM, BK)
        b_mask = col_ok[:, None] & (ks[None, :] < K)  # (BN, BK)
        a = tl.load(a_ptr + rows[:, None] * K + ks[None, :], mask=a_mask, other=0.0)  # (BM, BK) FP8 codes
        b = tl.load(b_ptr + cols[:, None] * K + ks[None, :], mask=b_mask, other=0.0)  # (BN, BK) FP8 codes
        if UPCAST:  # the interpreter has no FP8 arithmetic: decode the codes (exactly) to FP32
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        partial = tl.dot(a, tl.trans(b))  # (BM, BN) a fresh FP32 sum of 128 products: the tensor cores
        sa = tl.load(sa_ptr + rows * KT + kt, mask=row_ok, other=0.0)  # (BM,) this slice's tile scale per row
        sb = tl.load(sb_ptr + nb * KT + kt, mask=pid_n * BN < N, other=0.0)  # the weight block's scale (always there)
        acc += partial * sa[:, None] * sb  # promotion: scaled, then added in FP32
        if COUNT:
            count_read(counter, a_mask, 1)
            count_read(counter, b_mask, 1)
            count_read(counter, row_ok, 4)
            tl.atomic_add(counter, 4)  # the weight scale
    c_mask = row_ok[:, None] & col_ok[None, :]
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc, mask=c_mask)
    if COUNT:
        count_write(counter, c_mask, 4)


def _check_quantized(name: str, q: object, granularity: str, what: str):
    """``q`` must be a ``gputrain.fp8.Quantized`` of 2-D FP8 codes scaled by ``granularity`` groups of 128."""
    if not isinstance(q, Quantized):
        raise KernelInputError(
            f"{name} must be a gputrain.fp8.Quantized, got {type(q).__name__}; "
            f"make it with fp8.quantize(x, 'e4m3', '{granularity}')"
        )
    if q.granularity != granularity or q.block != SLICE:
        raise KernelInputError(
            f"{name} is scaled per {q.granularity} (block {q.block}); the {what} need one scale per "
            f"{'1x128 tile' if granularity == 'tile' else '128x128 block'}: fp8.quantize(x, fmt, '{granularity}')"
        )
    check_tensor(f"{name}.data", q.data, dtypes=FP8_DTYPES, ndim=2)
    check_tensor(f"{name}.scale", q.scale, dtypes=(torch.float32,), ndim=2, device=q.data.device)
    return q.data, q.scale


def _check_scale_shape(name: str, scale: torch.Tensor, want: tuple[int, int], groups: str) -> None:
    if tuple(scale.shape) != want:
        raise KernelInputError(f"{name}.scale has shape {tuple(scale.shape)}, but {groups} need {want}")


def fp8_gemm(
    qa, qb, *, block_m: int = 64, block_n: int = 64, traffic: Optional[Traffic] = None
) -> torch.Tensor:  # fmt: skip
    """``a @ b.T`` in FP32 (M, N) from DeepSeek-V3's FP8 operands, by :func:`fp8_gemm_kernel` (chapter 11).

    ``qa``: ``fp8.quantize(a, fmt, "tile")`` of the (M, K) activations;
    ``qb``: ``fp8.quantize(b, fmt, "block")`` of the (N, K) weights (E4M3 or
    E5M2 codes, either side).  ``block_m``: a power of two from 16 to 256;
    ``block_n``: a power of two from 16 to 128 (it must divide the 128 of a
    weight block).  Equals ``fp8.scaled_matmul(qa, qb)`` to FP32 rounding.
    """
    a, sa = _check_quantized("qa", qa, "tile", "activations")
    b, sb = _check_quantized("qb", qb, "block", "weights")
    m, n, k = check_matmul_shapes(a, b, b_transposed=True)
    kt = cdiv(k, SLICE)
    _check_scale_shape("qa", sa, (m, kt), f"1x128 tiles of a {(m, k)} activation")
    _check_scale_shape("qb", sb, (cdiv(n, SLICE), kt), f"128x128 blocks of a {(n, k)} weight")
    bm = check_block("block_m", block_m, minimum=16, maximum=256)
    if isinstance(block_n, int) and not isinstance(block_n, bool) and block_n > SLICE:
        raise KernelInputError(
            f"block_n={block_n} is above {SLICE}: a program's columns must share one 128x128 weight block "
            "(use 16, 32, 64 or 128)"
        )
    bn = check_block("block_n", block_n, minimum=16, maximum=SLICE)
    c = torch.zeros(m, n, dtype=torch.float32, device=a.device)
    if 0 in (m, n, k):  # nothing to launch: an empty product, or a sum of no terms
        return c
    counter, count = counter_args(traffic, a.device)
    launch(
        fp8_gemm_kernel, (cdiv(m, bm), cdiv(n, bn)), a, sa, b, sb, c, m, n, k, kt, counter,
        BM=bm, BN=bn, BK=SLICE, UPCAST=interpreted(), COUNT=count,
    )  # fmt: skip
    return c


def fp8_linear(
    x: torch.Tensor, weight: torch.Tensor, *, fmt: str = "e4m3", block_m: int = 64, block_n: int = 64,
    traffic: Optional[Traffic] = None,
) -> torch.Tensor:  # fmt: skip
    """``x @ weight.T`` the DeepSeek-V3 way: quantize in torch (1x128 tiles, 128x128 blocks), then :func:`fp8_gemm`.

    ``x`` (..., K) in any float dtype, ``weight`` (N, K); returns FP32 (..., N).
    """
    for name, t in (("x", x), ("weight", weight)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.dtype in FP8_DTYPES:
            raise KernelInputError(f"{name} must be a floating-point tensor to quantize, got {getattr(t, 'dtype', t)}")
    if weight.dim() != 2 or x.dim() == 0 or x.shape[-1] != weight.shape[1]:
        raise KernelInputError(
            f"x {tuple(x.shape)} must end in K and weight {tuple(weight.shape)} must be (N, K) with the same K"
        )
    qx, qw = quantize(x, fmt, "tile"), quantize(weight, fmt, "block")
    y = fp8_gemm(qx, qw, block_m=block_m, block_n=block_n, traffic=traffic)  # (M, N)
    return y.reshape(*x.shape[:-1], weight.shape[0])


def fp8_gemm_read_bytes(m: int, n: int, k: int, block_m: int, block_n: int) -> int:
    """Bytes :func:`fp8_gemm` requests to read (exact, ragged edges included; it writes ``4·M·N``).

    Codes, one byte each: ``tiled_read_bytes(M, N, K, BM, BN, 1)`` (A once per
    column of programs, B once per row).  Scales, four bytes each, per slice of
    128: every program reads its rows' tile scales (M per column of programs)
    and one weight-block scale.  So

        K·(M·⌈N/BN⌉ + N·⌈M/BM⌉) + 4·⌈K/128⌉·⌈N/BN⌉·(M + ⌈M/BM⌉)
    """
    check_sizes(block_m=block_m, block_n=block_n)  # before cdiv divides by them; tiled_read_bytes checks M, N, K
    codes = tiled_read_bytes(m, n, k, block_m, block_n, itemsize=1)
    scales = SCALE_BYTES * cdiv(k, SLICE) * cdiv(n, block_n) * (m + cdiv(m, block_m))
    return codes + scales

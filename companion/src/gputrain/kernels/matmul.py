"""Matrix multiplication, naive and tiled, in fp32, fp16, bf16 and FP8, accumulating in fp32 (chapter 11).

``C = A @ B`` with ``A`` (M, K) and ``B`` (K, N).  The naive kernel gives each
program one entry of ``C``: it reads a row of ``A`` and a column of ``B``, K
elements each, so every element of ``A`` is read N times and every element of
``B`` M times.  The tiled kernel gives each program a BM x BN tile of ``C``: it
walks along K, loading a BM x BK tile of ``A`` and a BK x BN tile of ``B`` into
on-chip memory (shared memory on a GPU) and multiplying them there with
``tl.dot`` (the tensor cores).  Each element of ``A`` is now read N / BN times
and each element of ``B`` M / BM times, so the bytes requested are

    itemsize · M · N · K · (1/BM + 1/BN)

(for fp32, 4·M·N·K·(1/BM + 1/BN)), and the naive kernel is the case BM = BN = 1.
Bigger tiles, fewer bytes per FLOP: the arithmetic intensity grows with the
tile.  The ceiling is on-chip memory, which :func:`largest_square_tile`
computes for a given shared-memory size.

FP8 operands are codes made by ``gputrain.fp8.quantize`` (never cast inside
the kernel: the interpreter rounds such casts wrongly); per-tensor scales
``scale_a``, ``scale_b`` multiply the fp32 result, as ``torch._scaled_mm`` does.
"""

from __future__ import annotations

from typing import Optional

import torch

from .checks import KernelInputError, check_matmul_shapes, check_sizes, check_tensor, check_tiles
from .launch import cdiv, interpreted, launch, next_power_of_2, tl, triton
from .traffic import Traffic, count_read, count_write, counter_args

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


@triton.jit
def naive_matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K, scale, counter,
    BK: tl.constexpr, ELEM_BYTES: tl.constexpr, COUNT: tl.constexpr,
):  # fmt: skip
    i = tl.program_id(0)  # one program per entry C[i, j]
    j = tl.program_id(1)
    acc = tl.zeros((BK,), dtype=tl.float32)
    for k0 in range(0, K, BK):
        ks = k0 + tl.arange(0, BK)
        mask = ks < K
        a = tl.load(a_ptr + i * K + ks, mask=mask, other=0.0).to(tl.float32)  # a row of A, BK at a time
        b = tl.load(b_ptr + ks * N + j, mask=mask, other=0.0).to(tl.float32)  # a column of B (stride N)
        acc += a * b
        if COUNT:
            count_read(counter, mask, 2 * ELEM_BYTES)
    tl.store(c_ptr + i * N + j, tl.sum(acc, axis=0) * scale)
    if COUNT:
        tl.atomic_add(counter + 1, 4)  # one fp32 entry of C


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K, stride_bk, stride_bn, scale, counter,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    ELEM_BYTES: tl.constexpr, COUNT: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)  # this program computes the tile C[pid_m*BM : +BM, pid_n*BN : +BN]
    pid_n = tl.program_id(1)
    rows = pid_m * BM + tl.arange(0, BM)  # (BM,)
    cols = pid_n * BN + tl.arange(0, BN)  # (BN,)
    acc = tl.zeros((BM, BN), dtype=tl.float32)  # the running sum stays on chip, in fp32
    for k0 in range(0, K, BK):
        ks = k0 + tl.arange(0, BK)  # (BK,)
        a_mask = (rows[:, None] < M) & (ks[None, :] < K)  # (BM, BK)
        b_mask = (ks[:, None] < K) & (cols[None, :] < N)  # (BK, BN)
        a = tl.load(a_ptr + rows[:, None] * K + ks[None, :], mask=a_mask, other=0.0)  # (BM, BK) tile of A
        b = tl.load(b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn, mask=b_mask, other=0.0)  # (BK, BN)
        if UPCAST:  # the interpreter's tl.dot multiplies bf16 bit patterns, not values
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)  # tensor cores on a GPU, fp32 accumulator
        if COUNT:
            count_read(counter, a_mask, ELEM_BYTES)
            count_read(counter, b_mask, ELEM_BYTES)
    c_mask = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc * scale, mask=c_mask)
    if COUNT:
        count_write(counter, c_mask, 4)


def _operands(a, b, scale_a, scale_b, b_transposed: bool = False) -> tuple[int, int, int, float]:
    check_tensor("a", a, dtypes=DTYPES, ndim=2)
    check_tensor("b", b, dtypes=DTYPES, ndim=2)
    if a.dtype != b.dtype:
        raise KernelInputError(f"a and b must share a dtype, got {a.dtype} and {b.dtype}")
    m, n, k = check_matmul_shapes(a, b, b_transposed=b_transposed)
    if (scale_a is not None or scale_b is not None) and a.dtype not in FP8_DTYPES:
        raise KernelInputError("scale_a and scale_b are for FP8 codes (gputrain.fp8.quantize); plain floats need none")
    scale = 1.0
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if s is None:
            continue
        if isinstance(s, torch.Tensor):
            if s.numel() != 1:
                raise KernelInputError(
                    f"{name} has {s.numel()} entries; this kernel takes one per-tensor scale "
                    "(tiles and blocks: gputrain.kernels.fp8_gemm)"
                )
            s = float(s.item())
        scale *= float(s)
    return m, n, k, scale


def matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    block: tuple[int, int, int] = (32, 32, 32),
    scale_a: "float | torch.Tensor | None" = None,
    scale_b: "float | torch.Tensor | None" = None,
    b_transposed: bool = False,
    traffic: Optional[Traffic] = None,
) -> torch.Tensor:
    """``a @ b`` (fp32 result) by the tiled kernel with ``block = (BM, BN, BK)`` (each a power of two >= 16).

    ``b_transposed=True``: ``b`` is stored (N, K) and read as its transpose, the
    way cuBLAS takes ``q @ k.T`` without copying ``k`` (attention's scores).
    """
    m, n, k, scale = _operands(a, b, scale_a, scale_b, b_transposed)
    bm, bn, bk = check_tiles("block", block, ("BM", "BN", "BK"), minimum=16, maximum=256)
    c = torch.zeros(m, n, dtype=torch.float32, device=a.device)
    if 0 in (m, n, k):  # nothing to launch: an empty product, or a sum of no terms
        return c
    counter, count = counter_args(traffic, a.device)
    precision = "ieee" if a.dtype == torch.float32 else "tf32"  # fp32 in full precision, like torch's default
    stride_bk, stride_bn = (1, k) if b_transposed else (n, 1)  # where B[kk, j] lives: b[j, kk] or b[kk, j]
    launch(
        matmul_kernel, (cdiv(m, bm), cdiv(n, bn)), a, b, c, m, n, k, stride_bk, stride_bn, scale, counter,
        BM=bm, BN=bn, BK=bk, UPCAST=interpreted(), PRECISION=precision, ELEM_BYTES=a.element_size(), COUNT=count,
    )  # fmt: skip
    return c


def naive_matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    scale_a: "float | torch.Tensor | None" = None,
    scale_b: "float | torch.Tensor | None" = None,
    traffic: Optional[Traffic] = None,
) -> torch.Tensor:
    """``a @ b`` (fp32 result), one program per output entry: M·N programs (keep shapes small when interpreted)."""
    m, n, k, scale = _operands(a, b, scale_a, scale_b)
    c = torch.zeros(m, n, dtype=torch.float32, device=a.device)
    if 0 in (m, n, k):
        return c
    counter, count = counter_args(traffic, a.device)
    bk = min(next_power_of_2(k), 1024)
    launch(
        naive_matmul_kernel, (m, n), a, b, c, m, n, k, scale, counter,
        BK=bk, ELEM_BYTES=a.element_size(), COUNT=count,
    )  # fmt: skip
    return c


# --- the arithmetic of tiles (no kernel needed) ----------------------------------------------------


def tiled_read_bytes(m: int, n: int, k: int, bm: int, bn: int, itemsize: int = 4) -> int:
    """Bytes of A and B the tiled kernel requests: A is read once per column of tiles, B once per row.

    Equal to ``itemsize·M·N·K·(1/BM + 1/BN)`` when BM divides M and BN divides N;
    ragged edges are masked, so in general A is read ``cdiv(N, BN)`` times and B
    ``cdiv(M, BM)`` times.  ``bm = bn = 1`` is the naive kernel.
    """
    check_sizes(0, m=m, n=n, k=k)  # an empty product reads nothing
    check_sizes(bm=bm, bn=bn, itemsize=itemsize)
    return itemsize * k * (m * cdiv(n, bn) + n * cdiv(m, bm))


def matmul_intensity(m: int, n: int, k: int, bm: int, bn: int, itemsize: int = 4) -> float:
    """FLOPs per byte of A and B requested: ``2MNK / tiled_read_bytes`` (``2 / (itemsize (1/BM + 1/BN))``)."""
    check_sizes(m=m, n=n, k=k)  # an empty product has no intensity (0 FLOPs over 0 bytes)
    return 2 * m * n * k / tiled_read_bytes(m, n, k, bm, bn, itemsize)


def tile_smem_bytes(bm: int, bn: int, bk: int, itemsize: int, stages: int = 1) -> int:
    """On-chip bytes a tile needs: ``stages`` copies of an A tile (BM x BK) and a B tile (BK x BN).

    Pipelined kernels keep several stages in flight so that the next tiles load
    while the current ones multiply; each stage costs the same bytes again.
    """
    check_sizes(bm=bm, bn=bn, bk=bk, itemsize=itemsize, stages=stages)
    return stages * (bm * bk + bk * bn) * itemsize


def largest_square_tile(smem_bytes: int, itemsize: int, bk: int = 64, stages: int = 1) -> int:
    """The largest power-of-two BM = BN whose tiles (with ``stages`` copies) fit ``smem_bytes`` of shared memory."""
    check_sizes(0, smem_bytes=smem_bytes)
    if smem_bytes < tile_smem_bytes(16, 16, bk, itemsize, stages):  # which also checks bk, itemsize and stages
        raise KernelInputError(f"{smem_bytes} bytes cannot hold even 16 x 16 tiles with BK={bk} and {stages} stage(s)")
    t = 16
    while tile_smem_bytes(2 * t, 2 * t, bk, itemsize, stages) <= smem_bytes:
        t *= 2
    return t

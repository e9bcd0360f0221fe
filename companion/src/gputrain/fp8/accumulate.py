"""The tensor core's accumulator: sums kept to ~14 mantissa bits, and promotion to FP32 (chapter 10, part 3)."""

from __future__ import annotations

from typing import Optional, Sequence

import torch


def round_mantissa(x: torch.Tensor, bits: int, mode: str = "truncate") -> torch.Tensor:
    """FP32 values with only ``bits`` fraction bits kept (FP32 keeps 23), by masking the bit pattern.

    ``"truncate"`` drops the low bits (round toward zero, as an adder that
    aligns and truncates does); ``"nearest"`` rounds half away from zero.
    """
    if not 0 <= bits <= 23:
        raise ValueError(f"bits must be between 0 and 23 (FP32 has 23 fraction bits), got {bits}")
    if mode not in ("truncate", "nearest"):
        raise ValueError(f"mode must be 'truncate' or 'nearest', got {mode!r}")
    if bits == 23:
        return x.float()
    drop = 23 - bits
    i = x.float().contiguous().view(torch.int32)
    if mode == "nearest":
        i = i + (1 << (drop - 1))  # sign-magnitude layout: this rounds the magnitude up from half
    return (i & ~((1 << drop) - 1)).view(torch.float32)


def limited_dot(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    mantissa_bits: int = 14,
    promote_every: Optional[int] = None,
    mode: str = "truncate",
    at: Optional[Sequence[int]] = None,
) -> torch.Tensor:
    """Row-wise dot products of ``a`` and ``b`` (D, K) summed the way an FP8 tensor core sums them (chapter 10).

    ``a`` and ``b`` are FP8 codes (``quantize(...).data``): the tensor core
    multiplies codes, and scales are applied outside the sum.  Products of
    FP8 numbers are exact in FP32; the running sum keeps only
    ``mantissa_bits`` fraction bits (DeepSeek-V3 measured about 14 on H800;
    FP32 keeps 23).  With ``promote_every = N_C`` the limited partial sum is
    added into a true FP32 accumulator every N_C products and restarted
    (DeepSeek-V3: 128, on the CUDA cores, which is also where a 1x128 tile's
    scale can be applied).  Returns the running result after each K in
    ``at`` (default: only the full length) as a (len(at), D) FP32 tensor.
    """
    if a.shape != b.shape or a.dim() != 2:
        raise ValueError(
            f"a and b must be (D, K) matrices of the same shape, got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    if promote_every is not None and promote_every < 1:
        raise ValueError(f"promote_every must be None or >= 1, got {promote_every}")
    products = a.float() * b.float()  # (D, K)
    D, K = products.shape
    marks = sorted(set(at or [K]))
    if marks[0] < 1 or marks[-1] > K:
        raise ValueError(f"every K in at must be between 1 and {K}, got {marks}")
    limited = torch.zeros(D)  # the tensor core's accumulator
    promoted = torch.zeros(D)  # FP32 on the CUDA cores
    out, want = [], set(marks)
    for k in range(K):
        limited = round_mantissa(limited + products[:, k], mantissa_bits, mode)
        if promote_every and (k + 1) % promote_every == 0:
            promoted, limited = promoted + limited, torch.zeros(D)
        if k + 1 in want:
            out.append(promoted + limited)
    return torch.stack(out)  # (len(at), D)


def exact_dot(a: torch.Tensor, b: torch.Tensor, at: Optional[Sequence[int]] = None) -> torch.Tensor:
    """The same running dot products in FP64 (exact for FP8 inputs at these lengths)."""
    sums = (a.double() * b.double()).cumsum(dim=1)  # (D, K)
    marks = sorted(set(at or [a.shape[1]]))
    return sums[:, [k - 1 for k in marks]].t()  # (len(at), D)

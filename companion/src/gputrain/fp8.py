"""FP8 training the way DeepSeek-V3 does it, built piece by piece and measured (chapter 10).

* Format facts for E4M3 and E5M2, read off all 256 bit patterns of the real
  ``torch.float8_*`` dtypes (:func:`representable`, :func:`format_facts`,
  :func:`cast_behaviour`); the formats themselves live in
  :mod:`gputrain.precision`.
* :func:`quantize` / :func:`dequantize` with one scale per tensor, per row,
  per 1x128 tile (DeepSeek-V3's activations) or per 128x128 block (its
  weights), computed online from the max-abs of each group.
* :func:`limited_dot`: a dot product accumulated with only ~14 mantissa bits,
  as DeepSeek-V3 measured on H800 tensor cores, with optional promotion of the
  partial sum to FP32 every ``N_C`` products.
* :class:`Float8Linear`: a drop-in ``nn.Linear`` whose forward and both
  backward GEMMs are FP8 products through ``torch._scaled_mm`` (tensorwise or
  rowwise scales), or the DeepSeek-V3 tile/block recipe emulated by
  quantize-dequantize; :func:`convert_to_float8` swaps it into a model.
* :func:`fast_scaled_mm`: whether ``torch._scaled_mm`` is fast here, measured
  once per process; where it is not (on some CPUs 2,500x slower than FP32),
  a Float8Linear multiplies the same FP8 numbers through the emulation.
"""

from __future__ import annotations

import fnmatch
import functools
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from .device import Timer, device_name, median_seconds
from .precision import FloatFormat, get_format
from .speed import cpu_threads, forced_verdict

FP8_NAMES = ("e4m3", "e5m2")
GRANULARITIES = ("tensor", "row", "tile", "block")
TILE = 128  # DeepSeek-V3: 1x128 activation tiles, 128x128 weight blocks, promotion every 128 products


def fp8_format(fmt: "str | FloatFormat") -> FloatFormat:
    """The :class:`~gputrain.precision.FloatFormat` of ``"e4m3"`` or ``"e5m2"`` (FP8 only)."""
    try:
        f = get_format(fmt)
    except ValueError:
        f = None
    if f is None or f.bits != 8:
        raise ValueError(f"unknown FP8 format {fmt!r}; use 'e4m3' or 'e5m2'")
    return f


def _check_granularity(granularity: str) -> None:
    if granularity not in GRANULARITIES:
        raise ValueError(f"unknown granularity {granularity!r}; use one of: {', '.join(GRANULARITIES)}")


# --- 1. the formats, as the real dtypes decode them ---------------------------------------------


def _all_codes(fmt: "str | FloatFormat") -> torch.Tensor:
    """The 256 values the 256 bit patterns of an FP8 dtype decode to (NaN and inf included)."""
    return torch.arange(256, dtype=torch.int32).to(torch.uint8).view(fp8_format(fmt).dtype).float()


def representable(fmt: "str | FloatFormat", lo: float = -math.inf, hi: float = math.inf) -> torch.Tensor:
    """Every finite value of ``fmt`` in ``[lo, hi)``, sorted (+0 and -0 count once)."""
    v = _all_codes(fmt)
    v = torch.unique(v[torch.isfinite(v)])  # sorted
    return v[(v >= lo) & (v < hi)]


def format_facts(fmt: "str | FloatFormat") -> dict[str, object]:
    """Range and precision of an FP8 format: from its definition, from ``torch.finfo``, and counted."""
    f = fp8_format(fmt)
    info, codes = torch.finfo(f.dtype), _all_codes(f)
    return {
        "format": f.name,
        "exponent bits": f.exponent_bits,
        "mantissa bits": f.mantissa_bits,
        "max": f.max,
        "finfo max": float(info.max),
        "smallest normal": f.smallest_normal,
        "finfo smallest normal": float(info.smallest_normal),
        "smallest subnormal": f.smallest_subnormal,
        "eps (gap above 1)": f.eps,
        "values in [1, 2)": len(representable(f, 1.0, 2.0)),
        "finite values": int(torch.unique(codes[torch.isfinite(codes)]).numel()),
        "NaN codes": int(torch.isnan(codes).sum()),
        "inf codes": int(torch.isinf(codes).sum()),
        "range (binades)": math.log2(f.max / f.smallest_subnormal),
    }


def cast_behaviour(fmt: "str | FloatFormat", values: Sequence[float]) -> list[float]:
    """What a plain ``.to(torch.float8_*)`` makes of each value, measured (it varies across versions)."""
    return torch.tensor(list(values), dtype=torch.float32).to(fp8_format(fmt).dtype).float().tolist()


# --- 2. scaling granularities ---------------------------------------------------------------------


@dataclass
class Quantized:
    """An FP8 tensor and the FP32 factors that turn it back into numbers: ``x ≈ data * scale``.

    ``scale`` has one entry per group: shape ``()`` for ``"tensor"``, ``(R, 1)``
    for ``"row"``, ``(R, ceil(C/128))`` for ``"tile"``, ``(ceil(R/128),
    ceil(C/128))`` for ``"block"``, where ``(R, C)`` is the input seen as a
    matrix (leading dimensions flattened, the last one is the inner dimension).
    """

    data: torch.Tensor  # (R, C) FP8 codes
    scale: torch.Tensor  # float32 dequantization factors, one per group
    fmt: str
    granularity: str
    shape: torch.Size  # the original shape
    block: int = TILE


def _grouped(x2: torch.Tensor, granularity: str, block: int) -> torch.Tensor:
    """``x2`` (R, C) viewed so that every group spans its own axes (no copy unless an edge is ragged).

    tensor, row: (R, C); tile: (R, Cb, block); block: (Rb, block, Cb, block).
    Ragged edges are padded with zeros, which never raise a max-abs.
    """
    if granularity in ("tensor", "row"):
        return x2
    R, C = x2.shape
    cb, rb = -(-C // block), -(-R // block)
    if granularity == "tile":
        return (F.pad(x2, (0, cb * block - C)) if C % block else x2).reshape(R, cb, block)
    ragged = C % block or R % block
    return (F.pad(x2, (0, cb * block - C, 0, rb * block - R)) if ragged else x2).reshape(rb, block, cb, block)


def _ungrouped(g: torch.Tensor, granularity: str, R: int, C: int) -> torch.Tensor:
    """Back from :func:`_grouped` to (R, C), dropping the padding."""
    if granularity in ("tensor", "row"):
        return g
    # explicit sizes, not -1: a reshape cannot infer a size when there are no elements (an empty batch)
    if granularity == "tile":
        return g.reshape(R, g.shape[1] * g.shape[2])[:, :C]
    return g.reshape(g.shape[0] * g.shape[1], g.shape[2] * g.shape[3])[:R, :C]


def _per_group(scale: torch.Tensor, granularity: str) -> torch.Tensor:
    """The stored scales shaped to broadcast against :func:`_grouped`."""
    return {"tile": lambda s: s[:, :, None], "block": lambda s: s[:, None, :, None]}.get(granularity, lambda s: s)(
        scale
    )


_GROUP_DIMS = {"row": (1,), "tile": (2,), "block": (1, 3)}


def _group_amax(g: torch.Tensor, granularity: str) -> torch.Tensor:
    """Max-abs of each group of a :func:`_grouped` tensor: () / (R,) / (R, Cb) / (Rb, Cb).

    A group with no entries (an empty batch: zero rows) has max-abs 0; torch's
    ``amax`` refuses to reduce over nothing.
    """
    dims = tuple(range(g.dim())) if granularity == "tensor" else _GROUP_DIMS[granularity]
    if g.numel() == 0:
        return g.new_zeros([n for i, n in enumerate(g.shape) if i not in dims])
    return g.abs().amax(dim=dims)


def quantize(
    x: torch.Tensor, fmt: str = "e4m3", granularity: str = "tensor", *, block: int = TILE, pow2_scale: bool = False
) -> Quantized:
    """Scale each group of ``x`` so its max-abs lands on the format's max, then round to FP8 (chapter 10).

    Scales are computed online from the current values (no history).  An
    all-zero group gets scale 1 (no 0/0).  ``pow2_scale`` rounds each scale up
    to a power of two, so scaling itself adds no rounding error.  Shapes that
    are not multiples of ``block`` keep a smaller last tile or block (zero
    padding while the max is taken).  Values are clamped to ±max before the
    cast, so the result does not depend on how a torch version casts
    out-of-range values.  Non-finite inputs make their whole group NaN (a
    training step sees it and skips).
    """
    f = fp8_format(fmt)
    _check_granularity(granularity)
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    shape = x.shape
    rows, cols = (math.prod(shape[:-1]), shape[-1]) if x.dim() else (1, 1)
    x2 = x.detach().float().reshape(rows, cols)  # (R, C): the last dim is the inner one; R may be 0
    g = _grouped(x2, granularity, block)
    scale = _group_amax(g, granularity) / f.max  # () / (R,) / (R, Cb) / (Rb, Cb)
    if pow2_scale:
        scale = torch.exp2(torch.ceil(torch.log2(scale)))
    # all-zero group (or underflow): 1; a NaN or inf scale stays, so its whole group dequantizes to NaN
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    if granularity == "row":
        scale = scale[:, None]  # (R, 1)
    codes = (g / _per_group(scale, granularity)).clamp(-f.max, f.max).to(f.dtype)
    data = _ungrouped(codes, granularity, *x2.shape).contiguous()  # (R, C), row-major for the GEMM
    return Quantized(data, scale, "e4m3" if f.exponent_bits == 4 else "e5m2", granularity, shape, block)


def dequantize(q: Quantized, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``data * scale`` in ``dtype``, in the original shape."""
    return dequantize_2d(q).reshape(q.shape).to(dtype)


def dequantize_2d(q: Quantized) -> torch.Tensor:
    """The FP32 values of ``q`` as the (R, C) matrix its codes are stored as."""
    g = _grouped(q.data.float(), q.granularity, q.block)
    return _ungrouped(g * _per_group(q.scale, q.granularity), q.granularity, *q.data.shape)


def fake_quantize(x: torch.Tensor, fmt: str = "e4m3", granularity: str = "tensor", **kwargs) -> torch.Tensor:
    """``dequantize(quantize(x))`` in ``x``'s dtype: the values an FP8 GEMM would really multiply."""
    return dequantize(quantize(x, fmt, granularity, **kwargs), x.dtype if x.is_floating_point() else torch.float32)


def quantization_error(x: torch.Tensor, fmt: str = "e4m3", granularity: str = "tensor", **kwargs) -> float:
    """Relative error ``‖x̂ − x‖ / ‖x‖`` of an FP8 round trip (Frobenius norms, in FP64)."""
    x64 = x.detach().double()
    err = fake_quantize(x.detach().float(), fmt, granularity, **kwargs).double() - x64
    return float(err.norm() / x64.norm().clamp_min(torch.finfo(torch.float64).tiny))


def flushed_fraction(x: torch.Tensor, fmt: str = "e4m3", granularity: str = "tensor", **kwargs) -> float:
    """Share of the nonzero entries of ``x`` that come back from an FP8 round trip as exactly zero."""
    x = x.detach().float()
    nonzero = x != 0
    back = fake_quantize(x, fmt, granularity, **kwargs)
    return float(((back == 0) & nonzero).sum() / nonzero.sum().clamp_min(1))


# --- 3. the accumulator ------------------------------------------------------------------------


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


# --- 4. FP8 GEMMs and the Float8Linear layer ----------------------------------------------------

_SUPPORT: dict[str, dict[str, str]] = {}


def check_fp8_capability(capability: tuple[int, int], name: str = "this GPU") -> None:
    """Raise one clear error for a GPU without FP8 tensor cores (before Ada/Hopper, sm_89/sm_90)."""
    if tuple(capability) < (8, 9):
        raise ValueError(
            f"FP8 tensor cores need compute capability 8.9 or newer (Ada, Hopper, Blackwell); "
            f"{name} is sm_{capability[0]}{capability[1]}: pass emulate=True to Float8Linear / "
            "convert_to_float8 (same numerics, no speed-up) or train in bf16"
        )


def scaled_mm_support(device: "torch.device | str" = "cpu") -> dict[str, str]:
    """What ``torch._scaled_mm`` accepts on ``device``: ``"ok"`` or the first line of its error, per scaling."""
    device = torch.device(device)
    key = str(device)
    if key in _SUPPORT:
        return _SUPPORT[key]
    n = 256
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device).to(torch.float8_e4m3fn)  # (M, K) row-major
    b = torch.randn(n, n, generator=g).to(device).to(torch.float8_e4m3fn).t()  # (K, N) column-major
    one = torch.ones((), device=device)
    blocks = n // TILE
    tries = {
        "tensorwise": (one, one),
        "rowwise": (torch.ones(n, 1, device=device), torch.ones(1, n, device=device)),
        # DeepSeek-V3's recipe as cuBLAS takes it: (M, K/128) outer-dim-major, 128x128 blocks for b
        "blockwise 1x128 x 128x128": (
            torch.ones(blocks, n, device=device).t(),
            torch.ones(blocks, blocks, device=device).t(),
        ),
    }
    result = {}
    for name, (sa, sb) in tries.items():
        try:
            torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
            result[name] = "ok"
        except Exception as e:  # the message is the information: which variant, which constraint
            result[name] = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
    _SUPPORT[key] = result
    return result


@dataclass(frozen=True)
class ScaledMMSpeed:
    """Whether ``torch._scaled_mm`` is fast here, per scaling (``"tensor"``, ``"row"``), measured once."""

    fast: dict  # granularity -> True: use the kernel; False: multiply the same FP8 numbers emulated
    slowdown: dict  # granularity -> time of _scaled_mm / time of the emulated product (1.0 on GPUs: not measured)
    reason: str  # one line for logs and the chapters

    def __str__(self) -> str:
        return self.reason


SCALED_MM_SLOW_FACTOR = 4.0  # a _scaled_mm this many times slower than the emulated product is not used
SCALED_MM_ENV = "GPUTRAIN_FAST_SCALED_MM"  # "0" (emulate) or "1" (kernel) overrides the measured verdict
FUSED = ("tensor", "row")  # the scalings torch._scaled_mm takes on every backend


def fast_scaled_mm(dev_type: Optional[str] = None) -> ScaledMMSpeed:
    """Measure once whether ``torch._scaled_mm`` is fast on this device, per scaling (chapter 10).

    A CUDA GPU with FP8 tensor cores (sm_89 or newer) runs it in hardware.  On
    a CPU the answer is measured, not guessed from CPU flags: a 64x64x64 FP8
    product through the kernel is timed against the emulated one (dequantize,
    FP32 product), which multiplies the same FP8 numbers.  On an AMX Intel Xeon
    the tensorwise kernel ran at 0.05 GFLOP/s, 2,500x slower than FP32, while
    the rowwise one kept pace; a scaling that is :data:`SCALED_MM_SLOW_FACTOR`
    times slower than the emulation is emulated by :class:`Float8Linear`.
    ``GPUTRAIN_FAST_SCALED_MM=0`` (or ``1``) overrides the verdict; the
    slowdown stays the measured one.
    """
    measured = _measured_scaled_mm(dev_type or ("cuda" if torch.cuda.is_available() else "cpu"))
    forced = forced_verdict(SCALED_MM_ENV, "emulate FP8 products", "use torch._scaled_mm")
    if forced is None:
        return measured
    verdict = "torch._scaled_mm" if forced else "emulated in FP32"
    return ScaledMMSpeed(
        {g: forced for g in FUSED}, measured.slowdown, f"FP8 products {verdict}: {SCALED_MM_ENV}={int(forced)}"
    )


@functools.lru_cache(maxsize=None)
def _measured_scaled_mm(dev_type: str, n: int = 64) -> ScaledMMSpeed:
    if dev_type == "cuda":
        cap = torch.cuda.get_device_capability()
        ok = tuple(cap) >= (8, 9)
        verdict = "FP8 tensor cores" if ok else "no FP8 tensor cores: emulate=True"
        return ScaledMMSpeed({g: ok for g in FUSED}, {g: 1.0 for g in FUSED}, f"torch._scaled_mm: {verdict}")
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)
    fast, slowdown = {}, {}
    with cpu_threads(1):
        for gran in FUSED:
            qa, qb = quantize(a, "e4m3", gran), quantize(b, "e4m3", gran)
            try:
                kernel = median_seconds(
                    lambda: scaled_matmul(qa, qb, emulate=False), repeats=3, dev=torch.device("cpu")
                )
            except RuntimeError:  # this build has no CPU kernel for the scaling: emulate
                kernel = math.inf
            emulated = median_seconds(lambda: scaled_matmul(qa, qb, emulate=True), repeats=3, dev=torch.device("cpu"))
            slowdown[gran] = kernel / emulated
            fast[gran] = slowdown[gran] < SCALED_MM_SLOW_FACTOR
    shown = ", ".join(
        f"{g}wise {'kernel' if fast[g] else 'emulated'} ({slowdown[g]:.3g}x the emulated time)" for g in FUSED
    )
    return ScaledMMSpeed(fast, slowdown, f"torch._scaled_mm on {device_name()} at {n}^3: {shown}")


def transpose(q: Quantized) -> Quantized:
    """The quantized transpose, reusing codes and scales: possible for tensor scales and square blocks.

    This is why DeepSeek-V3 scales weights in 128x128 blocks: the backward
    pass multiplies by W^T, and a block's scale serves both orientations,
    while a row's scale (or a 1x128 tile's) would run along the wrong axis.
    """
    if q.granularity not in ("tensor", "block") or q.data.dim() != 2 or len(q.shape) != 2:
        raise ValueError(
            f"a {q.granularity}-scaled tensor cannot be transposed in FP8 (its scales run along "
            "one axis); quantize the transpose instead"
        )
    scale = q.scale if q.granularity == "tensor" else q.scale.t().contiguous()
    return Quantized(q.data.t().contiguous(), scale, q.fmt, q.granularity, q.data.t().shape, q.block)


def _pad_codes(data: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """FP8 codes padded with zero bytes (+0.0 in both formats) to ``rows`` x ``cols``."""
    extra_r, extra_c = rows - data.shape[0], cols - data.shape[1]
    if not (extra_r or extra_c):
        return data
    return F.pad(data.view(torch.uint8), (0, extra_c, 0, extra_r)).view(data.dtype)


def _pad_scale(scale: torch.Tensor, rows: int) -> torch.Tensor:
    """Row scales (R, 1) padded with ones for the zero rows added by :func:`_pad_codes`."""
    if scale.dim() == 0 or scale.shape[0] == rows:
        return scale
    return torch.cat([scale, scale.new_ones(rows - scale.shape[0], 1)])


def emulates(granularity: str, dev_type: str) -> bool:
    """Whether an FP8 product with ``granularity`` scales is emulated by default on ``dev_type``.

    Tiles and blocks always are (no backend's ``_scaled_mm`` takes them on a
    CPU); tensor and row scales are where :func:`fast_scaled_mm` found the
    kernel slow.  A GPU always uses its kernel (and says so when it has none).
    """
    if granularity not in FUSED:
        return True
    return dev_type != "cuda" and not fast_scaled_mm(dev_type).fast[granularity]


def scaled_matmul(
    qa: Quantized, qb: Quantized, *, emulate: Optional[bool] = None, align: Optional[int] = None
) -> torch.Tensor:
    """``a @ b.T`` from FP8 operands ``qa`` (R, K) and ``qb`` (N, K), both scaled along K; FP32 (R, N).

    Tensor or row scales on both sides: one ``torch._scaled_mm`` (``b``
    column-major, as cuBLAS wants).  Tiles or blocks (DeepSeek-V3's recipe),
    or ``emulate``: an FP32 product of the dequantized operands, the same FP8
    values the fused kernel multiplies, added in FP32 as it does every 128.
    ``emulate=None`` takes the kernel where it is fast (:func:`emulates`).
    ``align`` pads K and N with zero bytes to a multiple (CUDA needs 16;
    default 16 on CUDA, 1 on the CPU, whose kernel takes any shape); zero
    padding changes no product.
    """
    if qa.data.shape[1] != qb.data.shape[1]:
        raise ValueError(f"inner dimensions differ: {tuple(qa.data.shape)} @ {tuple(qb.data.shape)}^T")
    if 0 in (*qa.data.shape, qb.data.shape[0]):  # an empty batch: no GEMM to launch, a sum of no products is 0
        return qa.data.new_zeros(qa.data.shape[0], qb.data.shape[0], dtype=torch.float32)  # (R, N)
    fused = {qa.granularity, qb.granularity} <= set(FUSED) and qa.granularity == qb.granularity
    if emulate is None:
        emulate = emulates(qa.granularity, qa.data.device.type)
    if emulate or not fused:
        return dequantize_2d(qa) @ dequantize_2d(qb).t()  # (R, N)
    align = align or (16 if qa.data.is_cuda else 1)
    (R, K), N = qa.data.shape, qb.data.shape[0]
    k_pad, n_pad = -(-K // align) * align, -(-N // align) * align
    a = _pad_codes(qa.data, R, k_pad)  # (R, K') row-major
    b = _pad_codes(qb.data, n_pad, k_pad)  # (N', K') row-major, so b.t() is column-major
    sa, sb = qa.scale, _pad_scale(qb.scale, n_pad).reshape(1, -1).contiguous()  # rowwise: (R, 1), (1, N')
    # CUDA's rowwise kernels want BF16 output; the CPU kernel keeps FP32
    out = torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16 if a.is_cuda else torch.float32)
    return out[:, :N].float()  # (R, N)


def fp8_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    a_fmt: str = "e4m3",
    b_fmt: str = "e4m3",
    granularity: str = "tensor",
    b_is_weight: bool = False,
    emulate: Optional[bool] = None,
    align: Optional[int] = None,
) -> torch.Tensor:
    """``a @ b.T`` for ``a`` (R, K) and ``b`` (N, K), both rounded to FP8 along K; FP32 (R, N).

    ``granularity``: ``"tensor"`` or ``"row"`` scales on both operands, or
    ``"block"`` for DeepSeek-V3's recipe: 1x128 tiles for activations and
    gradients, 128x128 blocks when ``b`` is a weight.  See :func:`scaled_matmul`.
    """
    if granularity not in ("tensor", "row", "block"):
        raise ValueError(
            f"unknown FP8 GEMM granularity {granularity!r}; use 'tensor', 'row' or 'block' "
            "(DeepSeek-V3's 1x128 tiles and 128x128 blocks)"
        )
    a_gran = "tile" if granularity == "block" else granularity
    b_gran = ("block" if b_is_weight else "tile") if granularity == "block" else granularity
    return scaled_matmul(quantize(a, a_fmt, a_gran), quantize(b, b_fmt, b_gran), emulate=emulate, align=align)


def _requantize_t(q: Quantized, granularity: str) -> Quantized:
    """The transpose of a saved FP8 operand, scaled along its new inner dim (reused when the scales allow)."""
    if q.granularity in ("tensor", "block") and q.granularity == granularity:
        return transpose(q)
    return quantize(dequantize_2d(q).t(), q.fmt, granularity)


class _Float8Matmul(torch.autograd.Function):
    """y = x @ w.T with the layer's three GEMMs in FP8: forward, input gradient, weight gradient.

    The input is saved for backward in FP8 (DeepSeek-V3 caches activations
    so); where the weight-gradient GEMM needs it scaled along the token axis
    instead, the saved codes are rescaled.
    """

    @staticmethod
    def forward(ctx, x, weight, cfg: dict):  # x (M, K), weight (N, K)
        gran = cfg["granularity"]
        act, wgt = ("tile", "block") if gran == "block" else (gran, gran)
        qx, qw = quantize(x, cfg["fmt"], act), quantize(weight, cfg["fmt"], wgt)
        with torch.autocast(x.device.type, enabled=False):
            out = scaled_matmul(qx, qw, emulate=cfg["emulate"])  # (M, N)
        ctx.save_for_backward(qx.data, qx.scale, weight)
        ctx.meta = (cfg, x.dtype, qx.fmt, qx.granularity, qx.shape, qw if wgt in ("tensor", "block") else None)
        return out.to(cfg["out_dtype"])

    @staticmethod
    def backward(ctx, grad):  # grad (M, N)
        x_codes, x_scale, weight = ctx.saved_tensors
        cfg, x_dtype, x_fmt, x_gran, x_shape, qw = ctx.meta
        gran, emulate = cfg["granularity"], cfg["emulate"]
        act, wgt = ("tile", "block") if gran == "block" else (gran, gran)
        gx = gw = None
        with torch.autocast(grad.device.type, enabled=False):
            qg = quantize(grad, cfg["grad_fmt"], act) if ctx.needs_input_grad[0] or act == "tensor" else None
            if ctx.needs_input_grad[0]:  # dX = dY @ W: inner dim N
                qwt = transpose(qw) if qw is not None else quantize(weight.t(), cfg["fmt"], wgt)  # (K, N)
                gx = scaled_matmul(qg, qwt, emulate=emulate).to(x_dtype)  # (M, K)
            if ctx.needs_input_grad[1]:  # dW = dY^T @ X: inner dim M (tokens)
                # one tensor scale serves both orientations; finer scales must run along M instead
                qgt = transpose(qg) if act == "tensor" else quantize(grad.t(), cfg["grad_fmt"], act)  # (N, M)
                qx = Quantized(x_codes, x_scale, x_fmt, x_gran, x_shape)
                gw = scaled_matmul(qgt, _requantize_t(qx, act), emulate=emulate).to(weight.dtype)  # (N, K)
        return gx, gw, None


class Float8Linear(nn.Linear):
    """``nn.Linear`` whose three GEMMs run in FP8 (chapter 10).

    ``granularity``: ``"tensor"`` or ``"row"`` scales through
    ``torch._scaled_mm`` (real FP8 tensor cores on Ada/Hopper; a CPU kernel
    here), or ``"block"`` for DeepSeek-V3's 1x128 tiles and 128x128 blocks,
    emulated.  ``emulate``: ``None`` takes the kernel where
    :func:`fast_scaled_mm` found it fast and emulates the same FP8 products
    elsewhere; ``True`` or ``False`` forces one path.  ``fmt`` rounds inputs and weights, ``grad_fmt`` the output
    gradient (default: E5M2, the wider range, with tensor scales, as in
    Micikevicius et al. 2022; E4M3 everywhere with finer scales, as in
    DeepSeek-V3).  Parameters stay in their own dtype (the master copy);
    the output has the autocast dtype when autocast is on, else the input's.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        granularity: str = "tensor",
        fmt: str = "e4m3",
        grad_fmt: Optional[str] = None,
        emulate: Optional[bool] = None,
        device=None,
        dtype=None,
    ):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        if granularity not in ("tensor", "row", "block"):
            raise ValueError(
                f"unknown Float8Linear granularity {granularity!r}; use 'tensor', 'row' or "
                "'block' (DeepSeek-V3's 1x128 tiles and 128x128 blocks)"
            )
        self.granularity, self.emulate = granularity, emulate
        self.fmt = "e4m3" if fp8_format(fmt).exponent_bits == 4 else "e5m2"
        grad_fmt = grad_fmt or ("e5m2" if granularity == "tensor" else "e4m3")
        self.grad_fmt = "e4m3" if fp8_format(grad_fmt).exponent_bits == 4 else "e5m2"
        self.last_path = ""  # which kernel the last forward used

    @classmethod
    def from_linear(cls, linear: nn.Linear, **kwargs) -> "Float8Linear":
        """A Float8Linear that shares ``linear``'s parameters (optimizer state and weight tying survive)."""
        with torch.device("meta"):  # no new weights are allocated
            new = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, **kwargs)
        new.weight = linear.weight
        new.bias = linear.bias
        return new

    def emulated(self, device: torch.device) -> bool:
        """Whether this layer's products are emulated on ``device`` (``emulate=None``: where the kernel is slow)."""
        return self.emulate if self.emulate is not None else emulates(self.granularity, device.type)

    def path(self, device: torch.device) -> str:
        """The kernel this layer uses on ``device`` (and the error for a GPU without FP8)."""
        if self.emulated(device):
            why = (
                ""
                if self.emulate or self.granularity == "block"
                else (
                    f" (torch._scaled_mm {self.granularity}wise is "
                    f"{fast_scaled_mm(device.type).slowdown[self.granularity]:.0f}x slower here)"
                )
            )
            return f"emulated: quantize-dequantize, FP32 matmul{why}"
        if device.type == "cuda":
            check_fp8_capability(torch.cuda.get_device_capability(device), torch.cuda.get_device_name(device))
        return f"torch._scaled_mm, {self.granularity}wise scales"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.last_path = self.path(x.device)
        dev = x.device.type
        out_dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else x.dtype
        cfg = {
            "fmt": self.fmt,
            "grad_fmt": self.grad_fmt,
            "granularity": self.granularity,
            "emulate": self.emulated(x.device),
            "out_dtype": out_dtype,
        }
        y = _Float8Matmul.apply(x.reshape(math.prod(x.shape[:-1]), self.in_features), self.weight, cfg)  # (M, N)
        y = y.reshape(*x.shape[:-1], self.out_features)  # (..., N)
        return y if self.bias is None else y + self.bias.to(y.dtype)

    def extra_repr(self) -> str:
        mode = {True: "emulated", False: "_scaled_mm", None: "_scaled_mm where fast"}[
            True if self.granularity == "block" else self.emulate
        ]
        return f"{super().extra_repr()}, fp8={self.fmt}/{self.grad_fmt}, {self.granularity}, {mode}"


DEFAULT_SKIP = ("head", "*.head", "lm_head", "*.lm_head", "output", "*.output")


def convert_to_float8(
    model: nn.Module, *, skip: "Iterable[str] | Callable[[str, nn.Module], bool]" = DEFAULT_SKIP, **kwargs
) -> nn.Module:
    """Replace every ``nn.Linear`` of ``model`` by a :class:`Float8Linear` sharing its weights (chapter 10).

    ``skip``: qualified-name patterns (``fnmatch``) or a predicate ``(name,
    module) -> bool`` naming layers to keep; by default the output head.  As
    in DeepSeek-V3, only the linear layers change: embeddings, norms and the
    attention core are not ``nn.Linear`` and keep their precision.
    ``kwargs`` go to :class:`Float8Linear`.  Returns ``model``, modified in place.
    """
    skipped = skip if callable(skip) else (lambda name, _m: any(fnmatch.fnmatchcase(name, p) for p in skip))
    converted = 0
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            if type(child) is nn.Linear and not skipped(name, child):
                setattr(parent, child_name, Float8Linear.from_linear(child, **kwargs))
                converted += 1
    if converted == 0 and not float8_layers(model):
        raise ValueError(f"{type(model).__name__} has no nn.Linear left to convert; check the skip patterns")
    return model


def float8_layers(model: nn.Module) -> list[str]:
    """Qualified names of the :class:`Float8Linear` layers in ``model``."""
    return [name for name, m in model.named_modules() if isinstance(m, Float8Linear)]


def linear_operands(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, skip: Iterable[str] = DEFAULT_SKIP
) -> dict[str, dict[str, torch.Tensor]]:
    """The three FP8 GEMM operands of every ``nn.Linear`` in one training step of ``model(x, y)``.

    Returns ``{"activations": {name: X (M, K)}, "weights": {name: W (N, K)},
    "gradients": {name: dY (M, N)}}`` (detached FP32 copies), for the layers
    :func:`convert_to_float8` would convert.  The model's gradients are left as
    they were.
    """
    found: dict[str, dict[str, torch.Tensor]] = {"activations": {}, "weights": {}, "gradients": {}}
    hooks = []
    for name, mod in model.named_modules():
        if type(mod) is not nn.Linear or any(fnmatch.fnmatchcase(name, p) for p in skip):
            continue
        hooks.append(
            mod.register_forward_hook(
                lambda m, inp, out, name=name: found["activations"].__setitem__(
                    name, inp[0].detach().float().reshape(-1, inp[0].shape[-1])
                )
            )
        )
        hooks.append(
            mod.register_full_backward_hook(
                lambda m, gin, gout, name=name: found["gradients"].__setitem__(
                    name, gout[0].detach().float().reshape(-1, gout[0].shape[-1])
                )
            )
        )
        found["weights"][name] = mod.weight.detach().float().clone()
    saved = [(p, p.grad) for p in model.parameters()]
    try:
        _, loss = model(x, y)
        loss.backward()
    finally:
        for h in hooks:
            h.remove()
        for p, g in saved:
            p.grad = g
    return found


# --- 5. timing (the FP8 memory recipes are rows of gputrain.memory.RECIPES) ------------------------


GemmKind = str  # "bf16", "fp8-tensor", "fp8-row", "fp8-block"


def gemm_operands(kind: GemmKind, m: int, k: int, n: int, device: torch.device, seed: int = 0) -> Callable[[], object]:
    """A zero-argument function running one (m, k) @ (k, n) product of ``kind`` on prepared operands."""
    g = torch.Generator(device=device).manual_seed(seed)  # made where they are used: GPU-sized operands
    a = torch.randn(m, k, generator=g, device=device)  # (M, K)
    w = torch.randn(n, k, generator=g, device=device)  # (N, K)
    if kind == "bf16":
        a16, w16 = a.bfloat16(), w.bfloat16()
        return lambda: a16 @ w16.t()
    if kind in ("fp8-tensor", "fp8-row"):
        gran = kind.split("-")[1]
        qa, qw = quantize(a, "e4m3", gran), quantize(w, "e4m3", gran)
        sb = qw.scale.reshape(1, -1).contiguous()
        return lambda: torch._scaled_mm(qa.data, qw.data.t(), qa.scale, sb, out_dtype=torch.bfloat16)
    if kind == "fp8-block":
        qa, qw = quantize(a, "e4m3", "tile"), quantize(w, "e4m3", "block")
        sa, sb = qa.scale.t().contiguous().t(), qw.scale.t()  # outer-dim-major, as cuBLAS takes them
        return lambda: torch._scaled_mm(qa.data, qw.data.t(), sa, sb, out_dtype=torch.bfloat16)
    raise ValueError(f"unknown GEMM kind {kind!r}; use bf16, fp8-tensor, fp8-row or fp8-block")


def gemm_tflops(
    kind: GemmKind,
    m: int,
    k: int,
    n: int,
    device: "torch.device | str" = "cpu",
    repeats: int = 5,
    budget_s: float = 1.0,
) -> float:
    """Measured TFLOP/s (2mkn FLOPs per product) of one GEMM of ``kind``, operands already prepared.

    The first call is timed too: where it alone takes more than ``budget_s``
    over ``repeats + 1`` (a slow CPU kernel, 2,500x slower than FP32 on some
    CPUs), its time is the measurement, and the product is not run again.
    """
    device = torch.device(device)
    run = gemm_operands(kind, m, k, n, device)
    with Timer(device) as first:
        run()
    if first.seconds > budget_s / (repeats + 1):
        return 2 * m * k * n / first.seconds / 1e12
    return 2 * m * k * n / median_seconds(run, repeats, warmup=0, dev=device) / 1e12

"""DeepSeek-V3's FP8 GEMM kernel (chapter 11) against gputrain.fp8's reference, its bytes, its refusals.

Shapes are never multiples of 128 (nor of the program tiles), so every mask and
the zero padding of the last slice of K are exercised.

Tolerance.  Both results are FP32 sums of the same FP8 values: the kernel adds
128 products per ``tl.dot`` and promotes, the reference multiplies dequantized
FP32 matrices.  They differ by rounding only, which is bounded by a multiple of
FP32's eps times ``|A| @ |B|^T`` (the sum of the magnitudes of the products:
an error bound that cancellation cannot break, unlike ``|c|``).  Measured here
(interpreter, the shapes and formats below) the difference is at most 4.6 eps of
that: the kernel is within 0.6 eps of the FP64 product, the reference within
4.3 eps.  The test allows 16 eps; a wrong scale or slice moves entries by whole
percent.  Compiled on a GPU
the tensor cores sum each 128-long slice in a ~14-bit accumulator (chapter 10):
the bound becomes 128 products x 2^-14, i.e. 2^-7 of the magnitudes.
"""

from __future__ import annotations

import pytest
import torch

from gputrain import fp8
from gputrain.kernels import KernelInputError, Traffic, fp8_gemm, fp8_gemm_read_bytes, fp8_linear, interpreted

pytest.importorskip("triton")
DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")
EPS = torch.finfo(torch.float32).eps
TOL = 16 * EPS if interpreted() else 128 * 2.0**-14  # see the module docstring


def randn(*shape, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(DEV)


def operands(m, n, k, a_fmt="e4m3", b_fmt="e4m3", seed=0):
    a, b = randn(m, k, seed=seed, scale=3.0), randn(n, k, seed=seed + 1, scale=0.05)
    a[:1, :1] = 200.0  # one outlier (when there is an entry): its tile alone gets a coarse scale
    return a, b, fp8.quantize(a, a_fmt, "tile"), fp8.quantize(b, b_fmt, "block")


def error_in_magnitudes(c: torch.Tensor, ref: torch.Tensor, qa, qb) -> float:
    """max |c - ref| / (|A| @ |B|^T): the rounding error, in units of the products' magnitudes."""
    mag = fp8.dequantize_2d(qa).abs().double() @ fp8.dequantize_2d(qb).abs().double().t()
    return float(((c.double() - ref.double()).abs() / mag.clamp_min(1e-300)).max())


SHAPES = [  # (M, N, K, block_m, block_n, formats of a and b): none a multiple of 128 or of its blocks
    (65, 33, 129, 16, 16, ("e4m3", "e4m3")),
    (200, 150, 300, 64, 64, ("e4m3", "e4m3")),
    (17, 200, 127, 32, 128, ("e4m3", "e4m3")),
    (130, 130, 520, 64, 32, ("e4m3", "e4m3")),
    (65, 33, 129, 16, 16, ("e5m2", "e5m2")),
    (200, 150, 300, 64, 64, ("e5m2", "e5m2")),
    (65, 33, 129, 32, 16, ("e4m3", "e5m2")),  # mixed formats: tl.dot takes any pair of FP8 types
]


@pytest.mark.parametrize("m, n, k, block_m, block_n, fmts", SHAPES)
def test_equals_the_reference_gemm_at_ragged_shapes(m, n, k, block_m, block_n, fmts):
    a, b, qa, qb = operands(m, n, k, *fmts)
    c = fp8_gemm(qa, qb, block_m=block_m, block_n=block_n)
    assert c.shape == (m, n) and c.dtype == torch.float32
    ref = fp8.scaled_matmul(qa, qb)  # dequantized FP32 operands, one FP32 matmul
    assert error_in_magnitudes(c, ref, qa, qb) < TOL
    if fmts[0] == fmts[1]:  # chapter 10's one-call recipe quantizes both operands the same way
        assert torch.equal(ref, fp8.fp8_gemm(a, b, a_fmt=fmts[0], b_fmt=fmts[1], granularity="block", b_is_weight=True))


def test_each_slice_gets_its_own_two_scales():
    """Scales six orders of magnitude apart along K and across weight blocks: a scale misplaced is visible."""
    m, n, k = 40, 200, 300  # 3 slices of K, 2 weight blocks (the second ragged)
    a = randn(m, k, seed=3) * torch.tensor([1e-3, 1.0, 1e3]).repeat_interleave(128)[:k].to(DEV)
    b = randn(n, k, seed=4) * torch.tensor([1.0, 1e3]).repeat_interleave(128)[:n, None].to(DEV)
    qa, qb = fp8.quantize(a, "e4m3", "tile"), fp8.quantize(b, "e4m3", "block")
    assert len(set(qa.scale[0].tolist())) == 3 and qb.scale.shape == (2, 3)
    c = fp8_gemm(qa, qb, block_m=16, block_n=64)
    assert error_in_magnitudes(c, fp8.scaled_matmul(qa, qb), qa, qb) < TOL
    exact = a.double() @ b.double().t()  # and close to the unquantized product: E4M3 keeps ~3 bits
    assert float((c.double() - exact).norm() / exact.norm()) < 0.05


def test_fp8_linear_quantizes_then_multiplies():
    x, w = randn(2, 9, 200, seed=5), randn(70, 200, seed=6)
    y = fp8_linear(x, w, block_m=16, block_n=32)
    assert y.shape == (2, 9, 70)
    ref = fp8.fp8_gemm(x.reshape(18, 200), w, granularity="block", b_is_weight=True).reshape(2, 9, 70)
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not interpreted(), reason="compiled, the tensor cores' short accumulator is really there")
def test_the_interpreter_cannot_show_the_short_accumulator():
    """On a CPU the kernel sums in FP32: far better than the ~14-bit tensor-core sum chapter 10 emulates."""
    d, k = 64, 1024
    a = fp8.quantize(randn(d, k, seed=7), "e4m3", "row").data  # (D, K) codes, as the tensor core sees them
    b = fp8.quantize(randn(d, k, seed=8), "e4m3", "row").data
    ones = torch.ones(d, k // 128, device=DEV)
    qa = fp8.Quantized(a, ones, "e4m3", "tile", a.shape)  # unit scales: the kernel sums raw code products
    qb = fp8.Quantized(b, ones[:1], "e4m3", "block", b.shape)
    kernel = fp8_gemm(qa, qb).diagonal().double().cpu()  # (D,) row i of a with row i of b
    exact = fp8.exact_dot(a.cpu().float(), b.cpu().float())[0]
    emulated = fp8.limited_dot(a.cpu(), b.cpu(), mantissa_bits=14, promote_every=128)[0].double()
    rel = lambda x: float((x - exact).norm() / exact.norm())  # noqa: E731
    assert rel(kernel) < 1e-6
    assert rel(emulated) > 100 * rel(kernel)  # what H800 tensor cores would lose, even with promotion


@pytest.mark.parametrize(
    "m, n, k, block_m, block_n", [(128, 128, 256, 64, 64), (65, 33, 129, 16, 16), (200, 150, 300, 64, 128)]
)
def test_counted_bytes_equal_the_formula(m, n, k, block_m, block_n):
    _, _, qa, qb = operands(m, n, k, seed=9)
    t = Traffic(DEV)
    fp8_gemm(qa, qb, block_m=block_m, block_n=block_n, traffic=t)
    assert t.read == fp8_gemm_read_bytes(m, n, k, block_m, block_n)
    assert t.written == 4 * m * n


def test_bytes_at_whole_tiles_are_codes_plus_a_thirty_second_of_scales():
    m = n = 256
    k = 512
    codes = m * n * k * (1 / 64 + 1 / 64)  # one byte per code, the tiled matmul's formula
    scales = 4 * (k // 128) * (n // 64) * (m + m // 64)
    assert fp8_gemm_read_bytes(m, n, k, 64, 64) == codes + scales
    assert 0.015 < scales / codes < 0.02  # 4 bytes per 128 codes of A, and next to nothing for B


@pytest.mark.parametrize(
    "args, name",
    [((64, 64, 128, 0, 64), "block_m=0"), ((64, 64, 128, 64, -16), "block_n=-16"), ((-1, 64, 128, 64, 64), "m=-1")],
)
def test_byte_formula_refuses_sizes_out_of_range(args, name):
    """A block of 0 divided by zero; a negative size gave negative bytes."""
    with pytest.raises(KernelInputError, match=f"^{name} is below"):
        fp8_gemm_read_bytes(*args)


def test_empty_products():
    _, _, qa, qb = operands(5, 7, 0)
    assert torch.equal(fp8_gemm(qa, qb), torch.zeros(5, 7, device=DEV))
    _, _, qa, qb = operands(0, 7, 130)
    assert fp8_gemm(qa, qb).shape == (0, 7)


def _bad(**change):
    _, _, qa, qb = operands(20, 30, 200, seed=10)
    return change.get("qa", qa), change.get("qb", qb)


QA, QB = _bad()
AS_TENSOR = fp8.quantize(randn(20, 200), "e4m3", "tensor")


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: fp8_gemm(QA.data, QB), "must be a gputrain.fp8.Quantized"),
        (lambda: fp8_gemm(AS_TENSOR, QB), "scaled per tensor"),
        (lambda: fp8_gemm(fp8.quantize(randn(20, 200), "e4m3", "row"), QB), "scaled per row"),
        (lambda: fp8_gemm(QA, fp8.quantize(randn(30, 200), "e4m3", "tile")), "128x128 block"),
        (lambda: fp8_gemm(fp8.quantize(randn(20, 200), "e4m3", "tile", block=64), QB), "block 64"),
        (lambda: fp8_gemm(fp8.Quantized(QA.data.float(), QA.scale, "e4m3", "tile", QA.shape), QB), "dtype float32"),
        (lambda: fp8_gemm(fp8.Quantized(QA.data, QA.scale.double(), "e4m3", "tile", QA.shape), QB), "dtype float64"),
        (lambda: fp8_gemm(QA, fp8.quantize(randn(30, 100), "e4m3", "block")), "inner dimensions 200 and 100"),
        (
            lambda: fp8_gemm(fp8.Quantized(QA.data, QA.scale[:, :1].contiguous(), "e4m3", "tile", QA.shape), QB),
            "need \\(20, 2\\)",
        ),
        (
            lambda: fp8_gemm(QA, fp8.Quantized(QB.data, QB.scale.expand(2, 2).contiguous(), "e4m3", "block", QB.shape)),
            "\\(1, 2\\)",
        ),
        (lambda: fp8_gemm(QA, QB, block_m=48), "power of two"),
        (lambda: fp8_gemm(QA, QB, block_m=8), "at least 16"),
        (lambda: fp8_gemm(QA, QB, block_n=256), "one 128x128 weight block"),
        (lambda: fp8_gemm(QA, QB, block_n=8), "at least 16"),
        (lambda: fp8_linear(randn(4, 200), randn(30, 100)), "same K"),
        (lambda: fp8_linear(QA.data, randn(30, 200)), "floating-point tensor to quantize"),
    ],
)
def test_bad_input_gets_one_clear_line(call, words):
    with pytest.raises(KernelInputError, match=words) as err:
        call()
    assert "\n" not in str(err.value)


def test_non_contiguous_codes_are_refused():
    q = fp8.quantize(randn(200, 20), "e4m3", "tile")
    t = fp8.Quantized(q.data.t(), torch.ones(20, 2, device=DEV), "e4m3", "tile", torch.Size((20, 200)))
    with pytest.raises(KernelInputError, match="not contiguous"):
        fp8_gemm(t, QB)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU tensors are right on a machine without CUDA")
def test_codes_on_the_wrong_device_are_named():
    meta = fp8.Quantized(QA.data.to("meta"), QA.scale, "e4m3", "tile", QA.shape)
    with pytest.raises(KernelInputError, match="kernels run on cpu"):
        fp8_gemm(meta, QB)

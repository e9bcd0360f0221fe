"""Chapter 11's first kernels (vector add, softmax, matmul) against torch, with their bytes counted.

Without CUDA the kernels run in Triton's interpreter: shapes stay small (a
program costs milliseconds) and are never multiples of the blocks, so every
mask is exercised.
"""

from __future__ import annotations

import os

import pytest
import torch

from gputrain import fp8
from gputrain.kernels import (
    KernelInputError,
    Traffic,
    add,
    largest_square_tile,
    matmul,
    mode,
    naive_matmul,
    softmax,
    softmax_unfused,
    tile_smem_bytes,
    tiled_read_bytes,
)
from gputrain.kernels.matmul import matmul_intensity

pytest.importorskip("triton")
DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).to(DEV)


def test_mode_follows_cuda():
    assert mode() == ("compiled" if torch.cuda.is_available() else "interpreter")


@pytest.mark.parametrize("n, block", [(1, 16), (1000, 128), (4097, 1024)])
def test_add_matches_torch_and_counts_three_arrays(n, block):
    x, y, t = randn(n, seed=1), randn(n, seed=2), Traffic(DEV)
    z = add(x, y, block=block, traffic=t)
    assert torch.equal(z, x + y)
    assert (t.read, t.written) == (2 * 4 * n, 4 * n)  # masked lanes are not counted


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_add_in_half_precision_is_torchs_sum_in_the_same_dtype(dtype):
    """The interpreter added bf16 bit patterns: [1, 2, 3] + [.5, .25, -1] gave [8.5e37, 8.5e37, nan]."""
    x, y = (
        torch.tensor([1.0, 2.0, 3.0], dtype=dtype, device=DEV),
        torch.tensor([0.5, 0.25, -1.0], dtype=dtype, device=DEV),
    )
    assert add(x, y).tolist() == [1.5, 2.25, 2.0]
    x, y, t = randn(1000, dtype=dtype, seed=1), randn(1000, dtype=dtype, seed=2), Traffic(DEV)
    z = add(x, y, block=128, traffic=t)  # 1000 is no multiple of 128: the last block is masked
    assert z.dtype == dtype and torch.equal(z, x + y)  # the exact sum rounded to nearest once, as torch does
    assert (t.read, t.written) == (2 * 2 * 1000, 2 * 1000)  # two bytes per element, however the sum is rounded


@pytest.mark.parametrize("shape", [(37, 100), (3, 5, 129), (1, 1)])
@pytest.mark.parametrize("fn", [softmax, softmax_unfused])
def test_softmax_matches_torch(shape, fn):
    x = randn(*shape, seed=3) * 20  # large logits: the max subtraction matters
    torch.testing.assert_close(fn(x), torch.softmax(x, dim=-1), rtol=1e-6, atol=1e-6)


def test_softmax_bytes_fused_once_unfused_five_reads_three_writes():
    rows, cols = 37, 100
    x = randn(rows, cols, seed=4)
    fused, unfused = Traffic(DEV), Traffic(DEV)
    softmax(x, traffic=fused)
    softmax_unfused(x, traffic=unfused)
    row_bytes = 4 * rows * cols
    assert (fused.read, fused.written) == (row_bytes, row_bytes)
    # max, sub, exp, sum, div: five reads of the matrix and three writes, plus a scalar per row twice
    assert (unfused.read, unfused.written) == (5 * row_bytes + 2 * 4 * rows, 3 * row_bytes + 2 * 4 * rows)


def test_softmax_half_precision_keeps_its_dtype():
    x = randn(9, 33, dtype=torch.float16, seed=5)
    y = softmax(x)
    assert y.dtype == torch.float16
    torch.testing.assert_close(y.float(), torch.softmax(x.float(), -1), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float16, 1e-5), (torch.bfloat16, 1e-5)])
@pytest.mark.parametrize("block", [16, 32, 64])
def test_tiled_matmul_matches_torch_at_odd_shapes(dtype, tol, block):
    a, b = randn(70, 50, dtype=dtype, seed=6), randn(50, 90, dtype=dtype, seed=7)
    c = matmul(a, b, block=(block, block, block))
    assert c.dtype == torch.float32
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=tol, atol=tol)  # fp32 accumulation of exact products


def test_matmul_reads_a_transposed_b_without_a_copy():
    a, b, t = randn(70, 50, seed=17), randn(90, 50, seed=18), Traffic(DEV)  # b is (N, K): c = a @ b.T
    torch.testing.assert_close(matmul(a, b, b_transposed=True, traffic=t), a @ b.t(), rtol=1e-5, atol=1e-5)
    assert t.read == tiled_read_bytes(70, 90, 50, 32, 32)
    with pytest.raises(KernelInputError, match="inner dimensions 50 and 90"):
        matmul(a, b.t().contiguous(), b_transposed=True)


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_matmul_equals_the_scaled_reference(fmt):
    a, b = randn(40, 72, seed=8), randn(72, 24, seed=9)
    qa, qb = fp8.quantize(a, fmt, "tensor"), fp8.quantize(b.t().contiguous(), fmt, "tensor")  # scaled along K
    c = matmul(qa.data, qb.data.t().contiguous(), scale_a=qa.scale, scale_b=qb.scale, block=(16, 16, 32))
    torch.testing.assert_close(c, fp8.scaled_matmul(qa, qb), rtol=1e-5, atol=1e-5)


def test_naive_matmul_matches_torch():
    a, b = randn(9, 37, seed=10), randn(37, 11, seed=11)
    torch.testing.assert_close(naive_matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("block", [16, 32, 64])
def test_tiled_bytes_equal_the_formula_exactly(block):
    m, n, k = 128, 64, 48  # tiles divide M and N: the formula holds with no rounding
    a, b, t = randn(m, k, seed=12), randn(k, n, seed=13), Traffic(DEV)
    matmul(a, b, block=(block, block, 16), traffic=t)
    assert t.read == 4 * m * n * k * (1 / block + 1 / block)
    assert t.read == tiled_read_bytes(m, n, k, block, block)
    assert t.written == 4 * m * n


def test_naive_bytes_are_the_formula_with_one_by_one_tiles():
    m, n, k = 8, 6, 40
    t = Traffic(DEV)
    naive_matmul(randn(m, k, seed=14), randn(k, n, seed=15), traffic=t)
    assert t.read == 4 * m * n * k * (1 / 1 + 1 / 1) == tiled_read_bytes(m, n, k, 1, 1)


def test_ragged_edges_count_only_the_elements_that_exist():
    m, n, k = 70, 90, 50
    t = Traffic(DEV)
    matmul(randn(m, k, dtype=torch.float16), randn(k, n, dtype=torch.float16), block=(32, 32, 16), traffic=t)
    assert t.read == tiled_read_bytes(m, n, k, 32, 32, itemsize=2)


def test_intensity_grows_with_the_tile():
    reads = [tiled_read_bytes(512, 512, 512, t, t) for t in (1, 16, 32, 64, 128)]
    assert reads == sorted(reads, reverse=True) and reads[0] / reads[-1] == 128


def test_largest_tiles_that_fit_hopper_shared_memory():
    smem = 228 * 1024
    sizes = {name: largest_square_tile(smem, itemsize, bk=64, stages=2) for name, itemsize in [("fp32", 4), ("fp8", 1)]}
    for name, itemsize in [("fp32", 4), ("fp8", 1)]:
        t = sizes[name]
        assert tile_smem_bytes(t, t, 64, itemsize, 2) <= smem < tile_smem_bytes(2 * t, 2 * t, 64, itemsize, 2)
    assert sizes["fp8"] == 4 * sizes["fp32"]  # a quarter of the bytes per element: tiles four times as wide


@pytest.mark.timeout(30)  # before the fix these looped forever: a tile of 0 bytes never outgrows shared memory
@pytest.mark.parametrize("name", ["stages", "itemsize", "bk"])
@pytest.mark.parametrize("value", [0, -1])
def test_tile_arithmetic_refuses_sizes_below_one(name, value):
    sizes = {"itemsize": 2, "bk": 64, "stages": 2, name: value}
    for call in (
        lambda: tile_smem_bytes(128, 128, sizes["bk"], sizes["itemsize"], sizes["stages"]),
        lambda: largest_square_tile(228 * 1024, sizes["itemsize"], bk=sizes["bk"], stages=sizes["stages"]),
    ):
        with pytest.raises(KernelInputError, match=f"^{name}={value} is below 1; pass {name} >= 1$"):
            call()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("smem", [float("inf"), 1.5, "228K"])
def test_largest_square_tile_wants_a_whole_number_of_bytes(smem):
    with pytest.raises(KernelInputError, match="smem_bytes must be an int"):
        largest_square_tile(smem, 2)


@pytest.mark.parametrize("block", [(32, 32), (32, 32, 32, 32), 32, None])
def test_matmul_block_is_three_sizes(block):
    """(32, 32) used to fail unpacking, and a 4-tuple was silently cut to its first three sizes."""
    with pytest.raises(
        KernelInputError, match=r"block takes 3 block sizes \(BM, BN, BK\).*pass e\.g\. block=\(32, 32, 32\)$"
    ):
        matmul(randn(32, 32), randn(32, 32), block=block)


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: tiled_read_bytes(64, 64, 64, 0, 32), "bm=0"),
        (lambda: tiled_read_bytes(64, 64, 64, 32, -32), "bn=-32"),
        (lambda: tiled_read_bytes(-1, 64, 64, 32, 32), "m=-1"),
        (lambda: tiled_read_bytes(64, 64, 64, 32, 32, itemsize=0), "itemsize=0"),
        (lambda: matmul_intensity(0, 64, 64, 32, 32), "m=0"),
    ],
)
def test_tile_byte_formulas_refuse_sizes_out_of_range(call, name):
    """These divided by zero or returned negative bytes."""
    with pytest.raises(KernelInputError, match=f"^{name} is below"):
        call()


def test_tile_byte_formulas_take_an_empty_product():
    assert tiled_read_bytes(0, 64, 64, 32, 32) == tiled_read_bytes(64, 64, 0, 32, 32) == 0


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: add(randn(4), randn(5)), "same shape"),
        (lambda: add(randn(4, dtype=torch.float64), randn(4, dtype=torch.float64)), "dtype"),
        (lambda: add(randn(4, 4).t(), randn(4, 4)), "contiguous"),
        (lambda: add(randn(8), randn(8), block=100), "power of two"),
        (lambda: matmul(randn(4, 5), randn(6, 3)), "inner dimensions"),
        (lambda: matmul(randn(32, 32), randn(32, 32), block=(8, 32, 32)), "at least 16"),
        (lambda: matmul(randn(32, 32), randn(32, 32, dtype=torch.float16)), "share a dtype"),
        (lambda: matmul(randn(32, 32), randn(32, 32), scale_a=2.0), "FP8 codes"),
        (lambda: matmul(randn(2, 3, 4), randn(4, 4)), "2 dimensions"),
        (lambda: softmax([1.0, 2.0]), "torch.Tensor"),
    ],
)
def test_bad_input_gets_one_clear_line(call, words):
    with pytest.raises(KernelInputError, match=words) as err:
        call()
    assert "\n" not in str(err.value)


def test_fp8_block_scales_are_refused_by_the_per_tensor_kernel():
    q = fp8.quantize(randn(32, 256, seed=16), "e4m3", "tile")
    with pytest.raises(KernelInputError, match="fp8_gemm"):
        matmul(q.data, q.data.t().contiguous(), scale_a=q.scale, scale_b=1.0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU tensors are right on a machine without CUDA")
def test_a_tensor_on_the_wrong_device_is_named():
    meta = torch.empty(4, device="meta")
    with pytest.raises(KernelInputError, match="kernels run on cpu"):
        add(meta, meta)


def test_without_triton_gputrain_imports_and_a_kernel_says_why(tmp_path):
    """macOS and Windows have no Triton wheel: importing works, launching names the way out."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['triton'] = None; sys.modules['triton.language'] = None\n"
        "import torch, gputrain, gputrain.kernels as k\n"
        "assert not k.HAVE_TRITON\n"
        "try:\n    k.add(torch.ones(4), torch.ones(4))\nexcept k.KernelUnavailable as e:\n    print('REFUSED', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("REFUSED Triton is not available") and "WSL" in out and out.count("\n") == 1


def test_empty_inner_dimension_is_a_sum_of_nothing():
    assert torch.equal(matmul(randn(3, 0), randn(0, 4)), torch.zeros(3, 4, device=DEV))
    assert torch.equal(naive_matmul(randn(3, 0), randn(0, 4)), torch.zeros(3, 4, device=DEV))


def test_show_prints_a_kernels_python_source(capsys, monkeypatch):
    import builtins

    import gputrain as gt
    from gputrain.kernels.add import add_kernel

    real_import = builtins.__import__

    def no_ipython(name, *args, **kwargs):  # plain Python: show() prints
        if name.startswith("IPython"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ipython)
    gt.show(add_kernel)
    out = capsys.readouterr().out
    assert out.startswith("@triton.jit\ndef add_kernel(") and "tl.program_id" in out


def test_kernels_work_after_something_else_imported_triton_language(tmp_path):
    """torch.compile imports triton.language before the kernels switch the interpreter on; they still run."""
    import subprocess
    import sys

    after_gputrain = (
        "import gputrain, torch\n"
        "import triton.language  # as torch.compile does on a CPU\n"
        "import gputrain.kernels as k\nprint(k.add(torch.ones(3), torch.ones(3)).tolist())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # a fresh shell, not pytest's
    run = subprocess.run([sys.executable, "-c", after_gputrain], capture_output=True, text=True, check=True, env=env)
    out = run.stdout
    assert out.strip() == "[2.0, 2.0, 2.0]"

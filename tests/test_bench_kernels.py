"""bench/gpu/kernels.py (chapter 11's kernels against torch on a GPU) runs everywhere with --dry-run.

On a CPU the dry run goes through Triton's interpreter at tiny sizes: it checks
every kernel against its reference and its counted bytes against the formulas,
and it times nothing.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from gputrain.kernels import HAVE_TRITON  # before anything imports triton: it switches the interpreter on
from gputrain.results import read_result

pytestmark = pytest.mark.skipif(not HAVE_TRITON, reason="Triton has no wheel for this platform")
SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "gpu" / "kernels.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_gpu_kernels", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def test_dry_run_checks_every_kernel_and_times_nothing(bench, tmp_path, capsys):
    assert bench.main(["--dry-run", "--out", str(tmp_path)]) == 0
    data = read_result(tmp_path / "kernels_dry_run.json")["data"]
    assert data["dry_run"] and data["mode"] == ("compiled" if torch.cuda.is_available() else "interpreter")
    names = [row["case"] for row in data["cases"]]
    for part in ("add", "softmax fp32 fused", "softmax fp32 five kernels", "matmul fp16", "matmul bf16",
                 "matmul fp8 e4m3 per-tensor", "fp8_gemm e4m3 1x128/128x128"):  # fmt: skip
        assert any(name.startswith(part) for name in names), part
    for row in data["cases"]:
        assert row["verified"] and row["norm_rel_error"] <= row["tolerance"], row
        assert row.get("counted_equals_formula", True), row["case"]
        assert "ours" not in row and all("ms" not in t for t in row["torch"].values())  # no timing claims
    assert all(row["counted_bytes"]["read"] > 0 for row in data["cases"])
    assert ("flash_attention" in data) == (bench.flash_attention is None)  # "not available" is recorded
    assert f"{len(names)} of {len(names)} cases verified" in capsys.readouterr().out


def test_attention_cases_run_forward_and_backward(bench, monkeypatch):
    """With any flash_attention(q, k, v, causal=, block_m=, block_n=), the four attention cases check out."""

    def stand_in(q, k, v, *, causal=False, block_m=64, block_n=64):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    monkeypatch.setattr(bench, "flash_attention", bench.flash_attention or stand_in)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rows = [bench.run_case(case, dev, True, None, None) for case in bench.attention_cases(dev, dry=True)]
    assert [r["case"].split()[1:3] for r in rows] == [
        ["forward", "full"], ["forward+backward", "full"], ["forward", "causal"], ["forward+backward", "causal"]
    ]  # fmt: skip
    assert all(r["verified"] for r in rows), rows
    assert rows[1]["roofline"]["flops"] == 3.5 * rows[0]["roofline"]["flops"] == 7 * rows[2]["roofline"]["flops"]


def test_without_a_gpu_the_real_run_refuses_in_one_line(bench, capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the real run would start")
    assert bench.main([]) == 1
    assert capsys.readouterr().err.count("\n") == 1


def test_roofline_bounds(bench):
    add = bench.roofline(1e9, 12e9, 67e12, 4.8e12)  # 1 FLOP per 12 bytes: memory
    gemm = bench.roofline(2 * 4096**3, 3 * 2 * 4096**2, 989e12, 4.8e12)
    assert add["bound"] == "memory" and add["roofline_seconds"] == 12e9 / 4.8e12
    assert gemm["bound"] == "compute" and gemm["roofline_seconds"] == 2 * 4096**3 / 989e12

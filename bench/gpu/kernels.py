"""Chapter 11's Triton kernels against torch on a CUDA GPU: checked, timed, and placed on the roofline.

For every kernel of ``gputrain.kernels`` (vector add, fused and five-kernel
softmax, tiled matmul in fp16/bf16 and per-tensor FP8, FlashAttention forward
and forward+backward, DeepSeek-V3's block-scaled FP8 GEMM) and its torch
counterpart (``+``, ``torch.softmax``, ``torch.matmul``, SDPA,
``torch._scaled_mm`` per tensor, per row and, where this torch has it,
blockwise), at sizes that keep a GPU busy:

1. the kernel's output is checked against a reference at that size (max
   error; a kernel that fails its check is not timed);
2. its requested bytes are counted in the kernel (``gputrain.kernels.Traffic``)
   and set beside the compulsory bytes (each input read once, the output
   written once) and, where the module has one, its formula;
3. both are timed (``triton.testing.do_bench``, median, L2 flushed) and placed
   on the roofline: FLOPs and bytes by formula against the datasheet peak
   (``gputrain.device.peak_flops``) and bandwidth, and the copy bandwidth
   measured here.

Writes ``<out>/kernels.json`` after every case, so a cut run keeps what it
measured:

    PYTHONPATH=companion/src python bench/gpu/kernels.py --out book/results

``--dry-run`` runs every case at tiny sizes with no timing: through Triton's
interpreter on a CPU (so any machine checks that the script works), compiled on
a GPU.  It writes ``kernels_dry_run.json`` only when ``--out`` is given.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from gputrain import fp8
from gputrain import kernels as K
from gputrain.device import device_name, gpu_spec, peak_flops
from gputrain.results import first_line, write_result

try:  # an older gputrain without it: the script still runs and says so
    from gputrain.kernels import flash_attention
except ImportError:
    flash_attention, NO_FLASH = None, "this version of gputrain.kernels has no flash_attention"


# (GPU size, dry-run size) of every case
SIZES = {
    "add": (1 << 27, 1000),
    "softmax": ((16384, 4096), (37, 100)),
    "matmul": ((4096, 4096, 4096), (70, 90, 50)),
    "attention": ((4, 16, 4096, 64), (1, 2, 50, 16)),
}
# (GPU tiles, dry-run tiles): a few untuned configurations each (each one is another compilation)
MATMUL_BLOCKS = ([(128, 128, 32), (128, 128, 64)], [(32, 32, 32)])
FP8_MATMUL_BLOCKS = ([(128, 128, 64), (128, 128, 128)], [(16, 16, 32)])
FP8_GEMM_BLOCKS = ([(64, 64), (128, 64), (128, 128)], [(16, 32)])
ATTENTION_BLOCKS = ([(64, 64)], [(16, 16)])
SDPA = "F.scaled_dot_product_attention"


@dataclass
class Case:
    name: str
    ours: Callable  # (traffic or None) -> tensor or tuple of tensors
    reference: Callable  # () -> what ours is checked against (same structure)
    flops: float
    min_bytes: int  # compulsory: every input read once, every output written once
    peak: str  # the gputrain.device.peak_flops key
    tol: float  # largest accepted ‖ours - reference‖ / ‖reference‖ (worst output)
    torch_fns: dict = field(default_factory=dict)  # name -> () -> result: torch's way to the same product
    formula_bytes: Optional[int] = None  # the kernel module's formula for the bytes ours requests
    checked: tuple = ()  # the torch_fns that multiply the same operands: their error is recorded too


def tensors(x) -> list[torch.Tensor]:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def check(ours, ref) -> dict:
    """Worst output's max |error|, max |error| / max |reference| and ‖error‖ / ‖reference‖."""
    worst = {"max_abs_error": 0.0, "max_rel_error": 0.0, "norm_rel_error": 0.0}
    for o, r in zip(tensors(ours), tensors(ref)):
        r64 = r.detach().double()
        d = (o.detach().double() - r64).abs()
        worst["max_abs_error"] = max(worst["max_abs_error"], float(d.max()) if d.numel() else 0.0)
        worst["max_rel_error"] = max(worst["max_rel_error"], float(d.max() / r64.abs().max().clamp_min(1e-300)))
        worst["norm_rel_error"] = max(worst["norm_rel_error"], float(d.norm() / r64.norm().clamp_min(1e-300)))
    return worst


def roofline(flops: float, nbytes: float, peak: Optional[float], bandwidth: Optional[float]) -> dict:
    """Arithmetic intensity, and (with a peak and a bandwidth) the bound and the shortest possible time."""
    out = {"flops": flops, "bytes": nbytes, "intensity_flop_per_byte": flops / nbytes}
    if peak and bandwidth:
        compute_s, memory_s = flops / peak, nbytes / bandwidth
        out.update(bound="compute" if compute_s >= memory_s else "memory", roofline_seconds=max(compute_s, memory_s))
    return out


def randn(*shape, dtype=torch.float32, dev, seed=0, scale=1.0):
    g = torch.Generator(device=dev).manual_seed(seed)
    return (torch.randn(*shape, generator=g, device=dev) * scale).to(dtype)


def elementwise_cases(dev, dry: bool) -> list[Case]:
    n = SIZES["add"][dry]
    x, y = randn(n, dev=dev, seed=1), randn(n, dev=dev, seed=2)
    rows, cols = SIZES["softmax"][dry]
    s = randn(rows, cols, dev=dev, seed=3, scale=10.0)
    softmax_flops = 5 * rows * cols  # max, subtract, exp, sum, divide: five operations per element
    exact = lambda: torch.softmax(s.double(), -1)  # noqa: E731
    return [
        Case(
            "add fp32", ours=lambda t: K.add(x, y, traffic=t), reference=lambda: x + y, flops=n,
            min_bytes=12 * n, peak="fp32", tol=0.0, torch_fns={"x + y": lambda: x + y}, formula_bytes=12 * n,
            checked=("x + y",),
        ),
        Case(
            "softmax fp32 fused", ours=lambda t: K.softmax(s, traffic=t), reference=exact, flops=softmax_flops,
            min_bytes=8 * rows * cols, peak="fp32", tol=1e-6, torch_fns={"torch.softmax": lambda: torch.softmax(s, -1)},
            formula_bytes=8 * rows * cols, checked=("torch.softmax",),
        ),
        Case(  # five reads of the matrix, three writes, a scalar per row read twice and written twice
            "softmax fp32 five kernels", ours=lambda t: K.softmax_unfused(s, traffic=t), reference=exact,
            flops=softmax_flops, min_bytes=8 * rows * cols, peak="fp32", tol=1e-6,
            formula_bytes=8 * 4 * rows * cols + 4 * 4 * rows,
        ),
    ]  # fmt: skip


def matmul_cases(dev, dry: bool) -> list[Case]:
    m, n, k = SIZES["matmul"][dry]
    flops, cases = 2 * m * n * k, []
    for dtype, name in ((torch.float16, "fp16"), (torch.bfloat16, "bf16")):
        a, b = randn(m, k, dtype=dtype, dev=dev, seed=4), randn(k, n, dtype=dtype, dev=dev, seed=5)
        for blk in MATMUL_BLOCKS[dry]:
            cases.append(Case(
                f"matmul {name} {'x'.join(map(str, blk))}",
                ours=lambda t, a=a, b=b, blk=blk: K.matmul(a, b, block=blk, traffic=t),
                reference=lambda a=a, b=b: a.float() @ b.float(), flops=flops,
                min_bytes=2 * (m * k + k * n) + 4 * m * n, peak=name,
                tol=1e-4,  # FP32 sums of exact products, added in another order than the FP32 reference's
                torch_fns={"torch.matmul": lambda a=a, b=b: a @ b}, checked=("torch.matmul",),
                formula_bytes=K.tiled_read_bytes(m, n, k, blk[0], blk[1], 2) + 4 * m * n,
            ))  # fmt: skip
    qa = fp8.quantize(randn(m, k, dev=dev, seed=6), "e4m3", "tensor")
    qb = fp8.quantize(randn(n, k, dev=dev, seed=7), "e4m3", "tensor")  # (N, K): scaled along K
    b_kn = qb.data.t().contiguous()  # (K, N) row-major, as the tiled kernel reads it
    sb, mm = qb.scale.reshape(1, 1), "torch._scaled_mm per-tensor"
    scales = dict(scale_a=float(qa.scale), scale_b=float(qb.scale))  # read once: no device sync in the timed call
    for blk in FP8_MATMUL_BLOCKS[dry]:
        cases.append(Case(
            f"matmul fp8 e4m3 per-tensor {'x'.join(map(str, blk))}",
            ours=lambda t, blk=blk: K.matmul(qa.data, b_kn, **scales, block=blk, traffic=t),
            reference=lambda: fp8.scaled_matmul(qa, qb, emulate=True), flops=flops,
            min_bytes=m * k + k * n + 4 * m * n, peak="fp8",
            # on Hopper this kernel never promotes: its tensor-core sum keeps ~14 bits over all of K (chapter 10's
            # emulation loses about 1 % at K = 4096); 5 % still catches a wrong kernel
            tol=5e-2,
            torch_fns={mm: lambda: torch._scaled_mm(qa.data, qb.data.t(), qa.scale, sb, out_dtype=torch.float32)},
            checked=(mm,), formula_bytes=K.tiled_read_bytes(m, n, k, blk[0], blk[1], 1) + 4 * m * n,
        ))  # fmt: skip
    return cases


def fp8_gemm_cases(dev, dry: bool) -> list[Case]:
    m, n, k = SIZES["matmul"][dry]
    qa = fp8.quantize(randn(m, k, dev=dev, seed=8), "e4m3", "tile")  # activations: 1x128 tiles
    qb = fp8.quantize(randn(n, k, dev=dev, seed=9), "e4m3", "block")  # weights: 128x128 blocks
    rowwise, blockwise = "torch._scaled_mm rowwise", "torch._scaled_mm blockwise 1x128/128x128"
    torch_fns: dict = {}
    try:  # per-row scales: other operands of the same shapes, prepared by chapter 10's benchmark helper
        torch_fns[rowwise] = fp8.gemm_operands("fp8-row", m, k, n, dev)
    except Exception as e:  # recorded by run_case
        torch_fns[rowwise] = e
    # DeepSeek-V3's scales on the same codes, laid out as cuBLAS takes them (outer dimension fastest)
    sa_t, sb_t = qa.scale.t().contiguous().t(), qb.scale.t()
    torch_fns[blockwise] = lambda: torch._scaled_mm(qa.data, qb.data.t(), sa_t, sb_t, out_dtype=torch.bfloat16)
    return [
        Case(
            f"fp8_gemm e4m3 1x128/128x128 {bm}x{bn}",
            ours=lambda t, bm=bm, bn=bn: K.fp8_gemm(qa, qb, block_m=bm, block_n=bn, traffic=t),
            reference=lambda: fp8.scaled_matmul(qa, qb), flops=2 * m * n * k,
            min_bytes=qa.data.numel() + qb.data.numel() + 4 * (qa.scale.numel() + qb.scale.numel() + m * n),
            peak="fp8",
            tol=2.0**-7,  # promoted every 128: at most 128 products in a ~14-bit sum (tests/test_kernels_fp8.py)
            torch_fns=torch_fns, checked=(blockwise,),
            formula_bytes=K.fp8_gemm_read_bytes(m, n, k, bm, bn) + 4 * m * n,
        )
        for bm, bn in FP8_GEMM_BLOCKS[dry]
    ]  # fmt: skip


def attention_cases(dev, dry: bool) -> list[Case]:
    if flash_attention is None:
        return []
    b, h, t_len, d = SIZES["attention"][dry]
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    q, k, v, do = (randn(b, h, t_len, d, dtype=dtype, dev=dev, seed=10 + i) for i in range(4))
    counts = "traffic" in inspect.signature(flash_attention).parameters

    def attend(fn, kw: dict, t=None, grads=False, upcast=False):
        """``fn(q, k, v, **kw)``, and with ``grads`` the gradients for dO too (all in FP32 with ``upcast``)."""
        qq, kk, vv = (x.detach().to(torch.float32 if upcast else dtype).requires_grad_(grads) for x in (q, k, v))
        o = fn(qq, kk, vv, **kw, **({"traffic": t} if t is not None else {}))
        return (o, *torch.autograd.grad(o, (qq, kk, vv), do.to(o.dtype))) if grads else o

    cases = []
    for causal, grads, (bm, bn) in [
        (c, g, blk) for c in (False, True) for g in (False, True) for blk in ATTENTION_BLOCKS[dry]
    ]:
        fwd = 4 * b * h * t_len * t_len * d * (0.5 if causal else 1.0)  # QK^T and PV, 2 FLOPs per multiply-add
        io = b * h * t_len * d * q.element_size()  # one of q, k, v, o
        ours_kw, sdpa_kw = dict(causal=causal, block_m=bm, block_n=bn), dict(is_causal=causal)
        cases.append(Case(
            f"flash_attention {'forward+backward' if grads else 'forward'} {'causal' if causal else 'full'} {bm}x{bn}",
            ours=lambda t, kw=ours_kw, g=grads: attend(flash_attention, kw, t if counts else None, g),
            reference=lambda kw=sdpa_kw, g=grads: attend(F.scaled_dot_product_attention, kw, None, g, upcast=True),
            # backward: 2.5x the forward's FLOPs (five products of the same size, against two); it reads q, k, v,
            # o and dO and writes dq, dk, dv, after the forward's four
            flops=(3.5 if grads else 1.0) * fwd, min_bytes=(12 if grads else 4) * io, peak="bf16",
            tol=2e-2 if dtype == torch.bfloat16 else 1e-4,
            torch_fns={SDPA: lambda kw=sdpa_kw, g=grads: attend(F.scaled_dot_product_attention, kw, None, g)},
            checked=(SDPA,),
        ))  # fmt: skip
    return cases


def run_case(case: Case, dev, dry: bool, peak: Optional[float], bandwidth: Optional[float]) -> dict:
    row: dict = {"case": case.name, "tolerance": case.tol, "peak_key": case.peak}
    row["roofline"] = roofline(case.flops, case.min_bytes, peak, bandwidth)
    try:
        traffic = K.Traffic(dev)
        ours, ref = case.ours(traffic), case.reference()
        row.update(check(ours, ref))
        row["verified"] = row["norm_rel_error"] <= case.tol
        row["counted_bytes"] = {"read": traffic.read, "written": traffic.written}
        if case.formula_bytes is not None:
            row["counted_equals_formula"] = traffic.total == case.formula_bytes
        if traffic.total:
            row["kernel_intensity_flop_per_byte"] = case.flops / traffic.total
    except Exception as e:  # a kernel that cannot run here: say why, time nothing
        row.update(verified=False, error=f"{type(e).__name__}: {first_line(e)}")
        return row
    row["torch"] = {}
    for name, fn in case.torch_fns.items():
        try:
            if isinstance(fn, Exception):
                raise fn
            got = fn()  # it runs (the dry run's whole point), and warms up
            row["torch"][name] = {} if dry else timed(fn, case, peak, bandwidth)
            if name in case.checked:
                row["torch"][name]["norm_rel_error"] = check(got, ref)["norm_rel_error"]
        except Exception as e:  # e.g. no blockwise _scaled_mm in this torch: recorded
            row["torch"][name] = {"error": f"{type(e).__name__}: {first_line(e, 200)}"}
    if not dry and row["verified"]:  # never time a kernel whose result is wrong
        row["ours"] = timed(lambda: case.ours(None), case, peak, bandwidth)
    return row


def timed(fn: Callable, case: Case, peak: Optional[float], bandwidth: Optional[float]) -> dict:
    """Milliseconds, TFLOP/s, GB/s of compulsory bytes, and the fractions of the peak and of the roofline."""
    from triton.testing import do_bench  # median of calls, the L2 cache flushed before each

    s = do_bench(fn, warmup=25, rep=100, return_mode="median") / 1e3
    out = {"ms": s * 1e3, "tflops": case.flops / s / 1e12, "gb_per_s_compulsory": case.min_bytes / s / 1e9}
    if peak:
        out["fraction_of_peak"] = case.flops / s / peak
    bound = roofline(case.flops, case.min_bytes, peak, bandwidth).get("roofline_seconds")
    if bound:
        out["fraction_of_roofline"] = bound / s
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="folder for kernels.json (default book/results)")
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes, no timing: checks the script runs")
    parser.add_argument("--max-seconds", type=float, default=80.0, help="start no new case after this")
    args = parser.parse_args(argv)
    dev = K.kernel_device()
    if dev.type != "cuda" and not args.dry_run:
        print("bench/gpu/kernels.py times a CUDA GPU; none is visible here (--dry-run checks it runs)", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    name = device_name(dev)
    spec = gpu_spec(name)  # the datasheet's HBM bandwidth, from the book's one GPU table
    bandwidth = spec.hbm_bandwidth if spec else None
    data: dict = {
        "device": name,
        "mode": K.mode(),
        "dry_run": args.dry_run,
        "datasheet_bandwidth_bytes_per_s": bandwidth,
    }
    data["peak_tflops"] = {d: (peak_flops(d, name) or 0) / 1e12 or None for d in ("fp32", "fp16", "bf16", "fp8")}
    if not args.dry_run:
        from gputrain.speed import copy_bandwidth

        data["measured_copy_bandwidth_bytes_per_s"] = copy_bandwidth(1 << 30, dev)
    if flash_attention is None:
        data["flash_attention"] = "not available: " + NO_FLASH
    out = args.out or (None if args.dry_run else Path("book/results"))
    path = out / ("kernels_dry_run.json" if args.dry_run else "kernels.json") if out else None
    data["cases"] = []
    builders = (elementwise_cases, matmul_cases, fp8_gemm_cases, attention_cases)
    for build in builders:
        try:
            cases = build(dev, args.dry_run)
        except Exception as e:  # a whole group that cannot be prepared: recorded, the others run
            data["cases"].append({"case": build.__name__, "error": f"{type(e).__name__}: {first_line(e)}"})
            continue
        for case in cases:
            if time.perf_counter() - t0 > args.max_seconds:
                data["cases"].append({"case": case.name, "error": f"skipped: past --max-seconds {args.max_seconds}"})
                continue
            row = run_case(case, dev, args.dry_run, peak_flops(case.peak, name), bandwidth)
            data["cases"].append(row)
            print(summary(row), flush=True)
            data["seconds_total"] = time.perf_counter() - t0
            if path:
                write_result(path, data)
    bad = [r["case"] for r in data["cases"] if not r.get("verified")]
    done = f"{len(data['cases']) - len(bad)} of {len(data['cases'])} cases verified in {time.perf_counter() - t0:.0f} s"
    print(done + (f"; failed or skipped: {', '.join(bad)}" if bad else "") + (f"; wrote {path}" if path else ""))
    return 0 if not bad else 1


def summary(row: dict) -> str:
    """One line per case: the check, the bytes counted, and (when timed) our time and torch's."""
    if "error" in row:
        return f"{row['case']:>44}: {row['error']}"
    text = f"{row['case']:>44}: err {row['norm_rel_error']:.1e} ({'ok' if row['verified'] else 'FAILED'})"
    c = row["counted_bytes"]
    text += f", {c['read'] + c['written']:,} B counted" + (
        "" if row.get("counted_equals_formula", True) else " (!= formula)"
    )
    if "ours" in row:
        text += f", {row['ours']['ms']:.3f} ms, {row['ours']['tflops']:.1f} TFLOP/s"
    for name, t in row["torch"].items():
        text += f"; {name}: " + (f"{t['ms']:.3f} ms" if "ms" in t else t.get("error", "runs")[:60])
    return text


if __name__ == "__main__":
    sys.exit(main())

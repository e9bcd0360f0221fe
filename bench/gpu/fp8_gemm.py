"""FP8 against BF16 on an FP8 GPU (Hopper, Ada): GEMMs, the Float8Linear layer, GPT steps, Accelerate.

Chapter 10.  Part 1: TFLOP/s of BF16 and FP8 E4M3 GEMMs (``torch._scaled_mm``
with tensorwise, rowwise and, where this torch/cuBLAS has it, DeepSeek-V3's
blockwise 1x128/128x128 scales) for square and LLM-shaped products, against
the datasheet peaks.  Part 2: forward + backward time of
``gputrain.fp8.Float8Linear`` against ``nn.Linear`` under BF16 autocast.
Part 3: training-step time of a GPT in BF16 autocast and after
``convert_to_float8``, all in eager mode.  Part 4: Accelerate's
``mixed_precision="fp8"`` (torchao) if it can run here, else its message.
Also records what a plain cast to FP8 does on the GPU and which
``_scaled_mm`` variants exist.  About a minute on an H200; writes
``<out>/fp8_gemm.json``:

    PYTHONPATH=companion/src python bench/gpu/fp8_gemm.py --out book/results
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

from gputrain import fp8
from gputrain.device import device, device_name, median_seconds, peak_flops
from gputrain.model import GPT, GPTConfig
from gputrain.results import first_line, write_result

SQUARE = [1024, 2048, 4096, 8192, 16384]
# (name, M tokens, K in, N out): feed-forward layers of real models at 16k tokens per step
LLM_SHAPES = [
    ("GPT-2 small MLP up", 16384, 768, 3072),
    ("Llama-3 8B MLP up", 16384, 4096, 14336),
    ("Llama-3 8B MLP down", 16384, 14336, 4096),
    ("Llama-3 70B MLP up", 8192, 8192, 28672),
]
KINDS = ["bf16", "fp8-tensor", "fp8-row", "fp8-block"]
LAYERS = [(16384, 4096, 4096), (16384, 4096, 14336), (8192, 8192, 8192)]


def part(name: str, fn, data: dict) -> None:
    """Run one part; a failure is recorded as its message instead of ending the run."""
    t0 = time.perf_counter()
    try:
        data[name] = fn()
    except Exception as e:  # the record says what failed; the other parts still run
        data[name] = {"error": f"{type(e).__name__}: {first_line(e)}"}
    print(f"[{name}] {time.perf_counter() - t0:.1f} s", flush=True)


def gemms(dev: torch.device, quick: bool) -> list[dict]:
    shapes = [(f"{n}^3", n, n, n) for n in (SQUARE[:2] if quick else SQUARE)] + ([] if quick else LLM_SHAPES)
    rows = []
    for name, m, k, n in shapes:
        for kind in KINDS:
            row = {"shape": name, "m": m, "k": k, "n": n, "kind": kind}
            try:
                row["tflops"] = fp8.gemm_tflops(kind, m, k, n, dev, repeats=3 if quick else 10)
                peak = peak_flops("bf16" if kind == "bf16" else "fp8")
                row["fraction_of_peak"] = row["tflops"] * 1e12 / peak if peak else None
            except Exception as e:  # e.g. no blockwise kernel in this build: say so in the table
                row["error"] = first_line(e, 200)
            rows.append(row)
            print(
                f"  {name:>22} {kind:>10}: {row.get('tflops', float('nan')):8.1f} TFLOP/s {row.get('error', '')[:60]}",
                flush=True,
            )
    return rows


def layer_step(layer: nn.Module, x: torch.Tensor) -> None:
    with torch.autocast(x.device.type, dtype=torch.bfloat16):
        y = layer(x)
    y.float().sum().backward()


def layers(dev: torch.device, quick: bool) -> list[dict]:
    rows = []
    for m, k, n in [(256, 256, 256)] if quick else LAYERS:
        torch.manual_seed(0)
        lin = nn.Linear(k, n, device=dev)
        x = torch.randn(m, k, device=dev, requires_grad=True)
        variants = {"nn.Linear (bf16 autocast)": lin}
        for g in ("tensor", "row", "block"):
            variants[f"Float8Linear {g}"] = fp8.Float8Linear.from_linear(lin, granularity=g)
        base = None
        for name, layer in variants.items():
            row = {"m": m, "k": k, "n": n, "layer": name}
            try:
                s = median_seconds(lambda: layer_step(layer, x), repeats=3 if quick else 10, warmup=2, dev=dev)
                row.update(seconds=s, tflops=6 * m * k * n / s / 1e12, path=getattr(layer, "last_path", "bf16"))
                base = base or s
                row["speedup_vs_bf16"] = base / s
            except Exception as e:
                row["error"] = first_line(e, 200)
            rows.append(row)
            print(f"  {m}x{k}->{n} {name:>26}: {row.get('seconds', float('nan')) * 1e3:8.2f} ms", flush=True)
    return rows


def gpt_steps(dev: torch.device, quick: bool) -> list[dict]:
    cfg = GPTConfig(vocab_size=50304, block_size=1024, n_layer=12, n_head=16, n_embd=2048)
    batch = 8
    if quick:
        cfg = GPTConfig(vocab_size=256, block_size=64, n_layer=2, n_head=4, n_embd=128)
        batch = 4
    g = torch.Generator().manual_seed(1)
    x, y = torch.randint(0, cfg.vocab_size, (2, batch, cfg.block_size), generator=g).to(dev)
    rows, base = [], None
    for name, gran in [("bf16 autocast", None), ("fp8 tensorwise", "tensor"), ("fp8 rowwise", "row")]:
        torch.manual_seed(0)
        with torch.device(dev):  # initialised on the GPU: seconds, not a minute, for 0.7 B parameters
            model = GPT(cfg)
        if gran:
            fp8.convert_to_float8(model, granularity=gran)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=dev.type == "cuda")
        losses = []

        def step(model=model, opt=opt, losses=losses):  # bound now: the loop rebinds these names
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                _, loss = model(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.detach())

        s = median_seconds(step, repeats=3 if quick else 8, warmup=2, dev=dev)
        tokens = batch * cfg.block_size
        base = base or s
        rows.append(
            {
                "variant": name,
                "seconds_per_step": s,
                "tokens_per_s": tokens / s,
                "speedup_vs_bf16": base / s,
                "params": sum(p.numel() for p in model.parameters()),
                "tokens_per_step": tokens,
                "fp8_layers": len(fp8.float8_layers(model)),
                "last_loss": float(losses[-1]),
            }
        )
        print(f"  GPT step {name:>15}: {s * 1e3:8.1f} ms, {tokens / s:,.0f} tokens/s", flush=True)
        del model, opt
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def accelerate_fp8(dev: torch.device) -> dict:
    out = {
        "torchao": importlib.util.find_spec("torchao") is not None,
        "transformer_engine": importlib.util.find_spec("transformer_engine") is not None,
    }
    try:
        from accelerate import Accelerator

        acc = Accelerator(mixed_precision="fp8", cpu=dev.type != "cuda")
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model, opt = acc.prepare(model, opt)
        x = torch.randn(64, 256, device=acc.device)
        loss = model(x).float().pow(2).mean()
        acc.backward(loss)
        opt.step()
        out.update(
            ran=True,
            model=type(acc.unwrap_model(model)).__name__,
            linear_types=sorted({type(m).__name__ for m in acc.unwrap_model(model).modules()}),
        )
    except Exception as e:
        out.update(ran=False, message=f"{type(e).__name__}: {first_line(e)}")
    return out


def numerics(dev: torch.device) -> dict:
    """What the GPU's own cast does out of range, and real FP8 kernels against the emulation."""
    vals = [448.0, 500.0, 1e6, float("inf"), 2.0**-10]
    casts = {f: torch.tensor(vals, device=dev).to(fp8.fp8_format(f).dtype).float().tolist() for f in fp8.FP8_NAMES}
    torch.manual_seed(0)
    a, b = torch.randn(1024, 4096, device=dev), torch.randn(512, 4096, device=dev)
    exact = a.double() @ b.double().t()
    err = {}
    for g in ("tensor", "row"):
        real = fp8.fp8_gemm(a, b, granularity=g)
        emu = fp8.fp8_gemm(a, b, granularity=g, emulate=True)
        err[g] = {
            "rel_error_vs_fp64": float((real.double() - exact).norm() / exact.norm()),
            "rel_diff_real_vs_emulated": float((real - emu).norm() / emu.norm()),
        }
    return {"values": vals, "casts": casts, "gemm": err}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("book/results"), help="folder for fp8_gemm.json")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test (also runs on a CPU)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() and not args.quick:
        print(
            "bench/gpu/fp8_gemm.py measures a CUDA GPU; none is visible here (--quick runs a CPU smoke test)",
            file=sys.stderr,
        )
        return 1
    dev = device()
    t0 = time.perf_counter()
    data: dict = {
        "device": device_name(dev),
        "peak_tflops": {d: (peak_flops(d) or 0) / 1e12 or None for d in ("bf16", "fp8")},
    }
    if dev.type == "cuda":
        data["capability"] = list(torch.cuda.get_device_capability(dev))
    part("scaled_mm_support", lambda: fp8.scaled_mm_support(dev), data)
    part("numerics", lambda: numerics(dev), data)
    part("gemm", lambda: gemms(dev, args.quick), data)
    part("layer", lambda: layers(dev, args.quick), data)
    part("gpt_step", lambda: gpt_steps(dev, args.quick), data)
    part("accelerate_fp8", lambda: accelerate_fp8(dev), data)
    data["seconds_total"] = time.perf_counter() - t0
    name = "fp8_gemm_quick.json" if args.quick else "fp8_gemm.json"
    write_result(args.out / name, data)
    print(f"wrote {args.out / name} in {data['seconds_total']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

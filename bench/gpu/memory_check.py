"""GPU memory of a real GPT training step against gputrain.memory.estimate, and mixed precision's speed.

Chapter 7.  Part 1: for fp32, bf16 autocast (what Accelerate's
``mixed_precision="bf16"`` does) and bf16-mixed (BF16 weights, FP32 master
weights), each with and without activation checkpointing, one training step
of a GPT-2-small-shaped model: ``torch.cuda.max_memory_allocated`` against
``estimate(...).peak``, saved-activation bytes against
``estimate(...).activations``, and the step time.  Part 2: tokens/s and peak
memory of ``gputrain.train`` (Accelerate) with ``mixed_precision`` no, bf16
and fp16.  Runs in well under a minute on one CUDA GPU and writes
``<out>/memory_check.json``:

    python bench/gpu/memory_check.py --out book/results
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from gputrain.device import Timer, device_name
from gputrain.memory import apply_activation_checkpointing, estimate, held_bytes, measure_step
from gputrain.model import GPT, GPTConfig
from gputrain.precision import MasterWeights
from gputrain.results import write_result

RECIPES = ["fp32", "bf16-autocast", "bf16-mixed"]


def build(cfg: GPTConfig, recipe: str, checkpointing: bool, device: torch.device):
    """The model and optimizer a recipe trains with (fused AdamW: no temporaries in the step)."""
    torch.manual_seed(0)
    model = GPT(cfg).to(device)
    if checkpointing:
        apply_activation_checkpointing(model)
    if recipe == "bf16-mixed":
        model = model.to(torch.bfloat16)
        return model, MasterWeights(model.parameters(), lambda ps: torch.optim.AdamW(ps, lr=1e-4, fused=True))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)


def step(model, optimizer, x, y, autocast) -> None:
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=autocast):
        _, loss = model(x, y)
    loss.backward()
    optimizer.step()


def check_one(cfg: GPTConfig, batch: int, recipe: str, checkpointing: bool, device: torch.device) -> dict:
    model, optimizer = build(cfg, recipe, checkpointing, device)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randint(0, cfg.vocab_size, (2, batch, cfg.block_size), generator=g).to(device)
    autocast = recipe == "bf16-autocast"
    step(model, optimizer, x, y, autocast)  # creates Adam's states, cuBLAS workspaces, kernels
    # saved activations (and the other components) of one step, counted tensor by tensor
    counted = measure_step(model, optimizer, x, y, torch.bfloat16 if autocast else None)
    times = []
    for _ in range(3):
        with Timer(device) as t:
            step(model, optimizer, x, y, autocast)
        times.append(t.seconds)
    # the allocator's own peak, minus what is neither state nor step (inputs, workspaces)
    optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    held = held_bytes(model, optimizer)
    other = torch.cuda.memory_allocated(device) - held
    step(model, optimizer, x, y, autocast)
    torch.cuda.synchronize(device)
    measured_peak = torch.cuda.max_memory_allocated(device) - other
    est = estimate(model, batch_size=batch, precision=recipe, optimizer="adamw", activation_checkpointing=checkpointing)
    row = {
        "recipe": recipe,
        "checkpointing": checkpointing,
        "batch_size": batch,
        "max_memory_allocated": measured_peak,
        "other_allocated": other,
        "estimate_peak": est.peak,
        "peak_error": est.peak / measured_peak - 1,
        "counted_peak": counted["peak"],
        "step_seconds": statistics.median(times),
        "estimate": est.as_dict(),
    }
    for name in ("parameters", "gradients", "master_weights", "optimizer_states", "activations"):
        row[f"measured_{name}"] = counted[name]
    row["activation_error"] = est.activations / counted["activations"] - 1
    del model, optimizer, x, y
    torch.cuda.empty_cache()
    return row


def accelerate_speed(cfg: GPTConfig, batch: int, steps: int) -> list[dict]:
    """tokens/s and peak memory of gputrain.train (Accelerate) for each mixed_precision setting."""
    from gputrain.train import TrainConfig, train

    rows = []
    for mp in ("no", "bf16", "fp16"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        tc = TrainConfig(
            n_layer=cfg.n_layer,
            n_embd=cfg.n_embd,
            n_head=cfg.n_head,
            block_size=cfg.block_size,
            vocab_size=256,
            batch_size=batch,
            max_steps=steps,
            warmup_steps=2,
            eval_interval=0,
            mixed_precision=mp,
            progress=False,
            corpus_bytes=2_000_000,
        )
        result = train(tc)
        rows.append(
            {
                "mixed_precision": mp,
                "tokens_per_s": result.tokens_per_s,
                "max_memory_allocated": torch.cuda.max_memory_allocated(),
                "final_loss": result.losses[-1],
            }
        )
        del result
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("book/results"), help="folder for memory_check.json")
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per step in part 1")
    parser.add_argument("--steps", type=int, default=30, help="training steps per setting in part 2")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench/gpu/memory_check.py measures a CUDA GPU; none is visible here", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    device = torch.device("cuda")
    cfg = GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)  # GPT-2 small
    rows = []
    for recipe in RECIPES:
        for ckpt in (False, True):
            r = check_one(cfg, args.batch_size, recipe, ckpt, device)
            rows.append(r)
            print(
                f"{recipe:>13} ckpt={ckpt!s:5}: peak {r['max_memory_allocated'] / 2**30:6.2f} GiB, "
                f"estimate {r['estimate_peak'] / 2**30:6.2f} GiB ({r['peak_error']:+.1%}); activations "
                f"{r['measured_activations'] / 2**30:6.2f} GiB ({r['activation_error']:+.1%}); "
                f"step {r['step_seconds'] * 1e3:6.1f} ms",
                flush=True,
            )
    speed_cfg = GPTConfig(vocab_size=256, block_size=1024, n_layer=12, n_head=12, n_embd=768)
    speed = accelerate_speed(speed_cfg, batch=16, steps=args.steps)
    for s in speed:
        print(
            f"accelerate mixed_precision={s['mixed_precision']:>4}: {s['tokens_per_s']:12,.0f} tokens/s, "
            f"peak {s['max_memory_allocated'] / 2**30:6.2f} GiB",
            flush=True,
        )
    data = {
        "device": device_name(),
        "model": {"n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257, "block_size": 1024},
        "rows": rows,
        "accelerate": speed,
        "seconds_total": time.perf_counter() - t0,
    }
    write_result(args.out / "memory_check.json", data)
    print(f"wrote {args.out / 'memory_check.json'} in {data['seconds_total']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What does gputrain.train cost over a plain PyTorch loop?  (chapter 6)

Trains the same GPT on the same data with the same optimizer, schedule and
clipping twice per round: once with a hand-written loop (forward, backward,
clip, step, ``loss.item()`` for the log), once with ``gputrain.train`` (the
Accelerate wrapper, the spike detector and non-finite guard, the progress
bar when --progress).  Rounds alternate the two so that a change in machine
load hits both alike; the ratio of median tokens/s is printed.  Target on a
CPU: gputrain.train >= 0.95x the plain loop.

    python bench/loop_overhead.py                 # tiny GPT, 5 rounds of 150 steps
    python bench/loop_overhead.py --rounds 9 --steps 300 --progress --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.utils.data import DataLoader

from gputrain import device
from gputrain.model import GPT
from gputrain.train import TrainConfig, build_data, lr_lambda, train


def plain_loop(cfg: TrainConfig) -> float:
    """The loop people write by hand; returns tokens/s of its timed part."""
    torch.manual_seed(cfg.seed)
    train_set, _ = build_data(cfg)
    loader = DataLoader(train_set, batch_size=cfg.batch_size, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(cfg.seed))
    dev = device.device()
    model = GPT(cfg.model_config()).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg))
    batches, losses, tokens = iter(loader), [], 0
    t0 = time.perf_counter()
    for _ in range(cfg.max_steps):
        try:
            x, y = next(batches)
        except StopIteration:
            batches = iter(loader)
            x, y = next(batches)
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)  # (B, T), (B, T)
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        tokens += y.numel()
    return tokens / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=150, help="optimizer steps per run")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (plain, gputrain)")
    parser.add_argument("--progress", action="store_true", help="keep gputrain's progress bar on")
    parser.add_argument("--threads", type=int, default=0,
                        help="CPU threads for torch (0: its default); 1 is steadier on a shared machine")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = TrainConfig(max_steps=args.steps, eval_interval=0, progress=args.progress, corpus_bytes=400_000)
    print(device.info_line())
    print(f"model: n_layer={cfg.n_layer} n_embd={cfg.n_embd} block_size={cfg.block_size} "
          f"batch_size={cfg.batch_size}; {args.steps} steps per run, {args.rounds} rounds")
    plain, ours = [], []
    for r in range(args.rounds):
        plain.append(plain_loop(cfg))
        ours.append(train(cfg).tokens_per_s)
        print(f"round {r + 1}: plain {plain[-1]:10,.0f} tokens/s   gputrain.train {ours[-1]:10,.0f} tokens/s   "
              f"ratio {ours[-1] / plain[-1]:.3f}", flush=True)
    ratio = statistics.median(ours) / statistics.median(plain)
    per_round = statistics.median(o / p for o, p in zip(ours, plain))
    print(f"median tokens/s: plain {statistics.median(plain):,.0f}, gputrain.train {statistics.median(ours):,.0f}")
    print(f"ratio of medians {ratio:.3f}; median of per-round ratios {per_round:.3f} (target >= 0.95)")


if __name__ == "__main__":
    main()

"""What does :func:`gputrain.train.train` cost over a plain PyTorch loop?  (chapter 6, "Making it fast")

Trains the same GPT on the same data with the same optimizer, schedule and
clipping twice per round: once with a hand-written loop (forward, backward,
clip, step, ``loss.item()`` for the log), once with ``train`` (the Accelerate
wrapper, the spike detector and non-finite guard, the progress bar when
asked).  Rounds alternate the two so that a change in machine load hits both
alike; the ratio of median tokens/s is the answer.  Target on a CPU:
``train`` >= 0.95x the plain loop.  ``gputrain bench --loop-overhead`` runs it.

The whole-loop ratio carries the machine's noise (a few percent a round), so
the bookkeeping that buys the reader something, the spike detector with the
non-finite guard and the metrics.csv row, is also timed on its own
(:func:`bookkeeping_seconds`) and given as a share of the plain loop's step:
it must stay under 1%.
"""

from __future__ import annotations

import math
import random
import statistics
import tempfile
import time
from typing import Callable, Optional

import torch
from torch.utils.data import DataLoader

from ..device import device, info_line
from ..model import GPT
from ..speed import cpu_threads
from .components import lr_lambda, param_groups
from .config import TrainConfig
from .inputs import build_data
from .loop import train
from .runlog import RunLog
from .step import StepGuard


def plain_loop(cfg: TrainConfig) -> float:
    """The loop people write by hand; returns tokens/s of its timed part."""
    torch.manual_seed(cfg.seed)
    train_set, _ = build_data(cfg)
    loader = DataLoader(
        train_set,
        batch_size=cfg.batch_size,
        shuffle=True,
        drop_last=True,
        generator=torch.Generator().manual_seed(cfg.seed),
    )
    dev = device()
    model = GPT(cfg.model_config()).to(dev)
    opt = torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2))
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
        loss = model(x, y)[1]  # as train_step: logits not held through backward
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        tokens += y.numel()
    return tokens / (time.perf_counter() - t0)


def bookkeeping_seconds(calls: int = 2000) -> float:
    """Seconds per step of ``train``'s own bookkeeping: the step guard (spike detector over its full window,
    non-finite checks) and one metrics.csv row, line-buffered to disk, as a run does them."""
    guard, rng = StepGuard(), random.Random(0)
    with tempfile.TemporaryDirectory() as folder:
        log = RunLog(TrainConfig(log_dir=folder), _MainProcess(), rows=[])
        t0 = time.perf_counter()
        for step in range(1, calls + 1):
            loss, norm = 2.0 + rng.gauss(0, 0.05), 0.5 + rng.random()
            event = "" if guard(loss, norm) else "skipped"
            log.row(step=step, epoch=step / 1000, loss=loss, val_loss="", lr=3e-3 * math.cos(step / calls),
                    grad_norm=norm, tokens_per_s=12345.6, event=event)  # fmt: skip
        seconds = (time.perf_counter() - t0) / calls
        log.close()
    return seconds


class _MainProcess:
    """What RunLog asks of an Accelerator, for :func:`bookkeeping_seconds`."""

    is_main_process = True


def loop_overhead(
    steps: int = 150,
    rounds: int = 5,
    progress: bool = False,
    threads: int = 0,
    log: Optional[Callable[[str], None]] = print,
) -> dict:
    """Alternate the plain loop and ``train`` for ``rounds`` rounds; return their tokens/s and ratios.

    ``threads`` > 0 pins torch to that many CPU threads (1 is steadier on a shared machine).
    """
    if steps < 1 or rounds < 1:
        raise ValueError(f"steps and rounds must be >= 1, got {steps} and {rounds}")
    cfg = TrainConfig(
        max_steps=steps, warmup_steps=min(20, steps), eval_interval=0, progress=progress, optimizer="adamw"
    )
    say = log or (lambda message: None)
    plain, ours = [], []
    with cpu_threads(threads or torch.get_num_threads()):
        say(info_line())  # inside the block: the threads it prints are the ones the runs use
        say(
            f"model: n_layer={cfg.n_layer} n_embd={cfg.n_embd} block_size={cfg.block_size} "
            f"batch_size={cfg.batch_size}; {steps} steps per run, {rounds} rounds"
        )
        for r in range(rounds):
            plain.append(plain_loop(cfg))
            ours.append(train(cfg).tokens_per_s)
            say(
                f"round {r + 1}: plain {plain[-1]:10,.0f} tokens/s   gputrain.train {ours[-1]:10,.0f} tokens/s   "
                f"ratio {ours[-1] / plain[-1]:.3f}"
            )
    ratio = statistics.median(ours) / statistics.median(plain)
    per_round = statistics.median(o / p for o, p in zip(ours, plain))
    say(f"ratio of medians {ratio:.3f}; median of per-round ratios {per_round:.3f} (target >= 0.95)")
    step_s = cfg.batch_size * cfg.window / statistics.median(plain)  # the plain loop's seconds per step
    book_s = bookkeeping_seconds()
    say(
        f"bookkeeping (spike and non-finite guard, metrics.csv row): {book_s * 1e6:.0f} us a step, "
        f"{book_s / step_s:.2%} of the plain loop's {step_s * 1e3:.1f} ms step (target < 1%)"
    )
    return {
        "ratio": ratio,
        "per_round_ratio": per_round,
        "plain_tokens_per_s": plain,
        "train_tokens_per_s": ours,
        "steps": steps,
        "rounds": rounds,
        "threads": threads or torch.get_num_threads(),
        "bookkeeping_s": book_s,
        "bookkeeping_share": book_s / step_s,
    }

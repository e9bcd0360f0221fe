"""An IsoFLOP sweep of the book's GPT (chapter 14): which sizes, how many steps, one run, one record.

For each compute budget C, six model sizes each train for ``C / (6N + 12LTC)``
tokens, so every run of a budget costs the same FLOPs.  The rules, stated
once here and on the page:

* sizes come from :data:`LADDER`, each 1.2-1.6x the last (about sqrt 2);
  budget k (of five budgets sorted, each sqrt 2 times the last) takes six
  consecutive rungs starting at rung ``max(0, k - 3)``.  Earlier tries showed
  the smallest budgets' best size at or below the smallest rung: on bytes, at
  these budgets, the optimum lies at far more tokens per parameter than
  Chinchilla's 20, and the ladder does not go lower (below about 10 K
  parameters the embeddings are most of the model);
* every run has its own cosine schedule to its own length (Chinchilla found a
  schedule longer than the run overstates its loss), warmup 5% of the steps,
  decay to 10% of the peak;
* the peak learning rate falls with width: ``3e-3 * sqrt(64 / C)``;
* 16 windows of 64 bytes per step (a try at 32 lost 0.1-0.2 nats at the
  smallest budget: its runs took too few optimizer steps), one pass at most
  over the data (a run reads fewer tokens than the corpus holds, so no window
  repeats).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass

from .counting import Shape, flops_per_token, parameter_counts, run_flops

BLOCK_SIZE = 64  # bytes of context, and of every training window
BATCH_SIZE = 16  # windows per step
TOKENS_PER_STEP = BLOCK_SIZE * BATCH_SIZE
SIZES_PER_BUDGET = 6
LADDER: tuple[Shape, ...] = (
    Shape(2, 16, 2),
    Shape(2, 20, 2),
    Shape(2, 24, 2),
    Shape(2, 32, 2),
    Shape(2, 40, 2),
    Shape(2, 48, 3),
    Shape(3, 48, 3),
    Shape(3, 56, 4),
    Shape(3, 64, 4),
    Shape(4, 64, 4),
    Shape(4, 80, 5),
    Shape(4, 96, 6),
    Shape(4, 112, 8),
    Shape(4, 128, 8),
    Shape(5, 160, 10),
)


def peak_lr(shape: Shape) -> float:
    """The sweep's learning-rate rule: 3e-3 at width 64, falling as 1/sqrt(width)."""
    return 3e-3 * math.sqrt(64 / shape.n_embd)


@dataclass(frozen=True)
class RunPlan:
    """One run of the sweep: a shape trained for the steps its budget buys."""

    budget: float  # the FLOP budget this run belongs to
    shape: Shape
    steps: int  # optimizer steps: round(budget / (flops per token * tokens per step))
    warmup: int  # linear warmup steps (5% of the steps, at least 1)
    lr: float  # peak learning rate (:func:`peak_lr`)

    @property
    def tokens(self) -> int:
        return self.steps * TOKENS_PER_STEP

    @property
    def flops(self) -> float:
        """The FLOPs the run actually does (its steps are whole, so near the budget, not on it)."""
        return run_flops(self.shape.gpt_config(BLOCK_SIZE), self.tokens)


def plan_run(shape: Shape, budget: float) -> RunPlan:
    """The steps ``budget`` FLOPs buy for ``shape``, with the sweep's schedule and learning rate."""
    if not (math.isfinite(budget) and budget > 0):
        raise ValueError(f"budget must be a positive number of FLOPs, got {budget}")
    per_step = flops_per_token(shape.gpt_config(BLOCK_SIZE)) * TOKENS_PER_STEP
    steps = max(2, round(budget / per_step))
    return RunPlan(budget=budget, shape=shape, steps=steps, warmup=max(1, steps // 20), lr=peak_lr(shape))


def plan_sweep(budgets, ladder: tuple[Shape, ...] = LADDER, sizes: int = SIZES_PER_BUDGET) -> list[RunPlan]:
    """Every run of an IsoFLOP sweep: ``sizes`` rungs per budget; from the fourth budget on, one rung up per budget."""
    budgets = sorted(float(b) for b in budgets)
    if len(ladder) < sizes:
        raise ValueError(f"the ladder has {len(ladder)} sizes, fewer than the {sizes} each budget needs")
    plans = []
    for k, budget in enumerate(budgets):
        first = min(max(0, k - 3), len(ladder) - sizes)
        plans += [plan_run(shape, budget) for shape in ladder[first : first + sizes]]
    return plans


def train_config(plan: RunPlan, **overrides):
    """The :class:`gputrain.train.TrainConfig` of one run (``overrides``: data, corpus_bytes, cache_dir, ...)."""
    from ..train import TrainConfig

    s = plan.shape
    base = dict(
        n_layer=s.n_layer,
        n_head=s.n_head,
        n_embd=s.n_embd,
        block_size=BLOCK_SIZE,
        batch_size=BATCH_SIZE,
        max_steps=plan.steps,
        warmup_steps=plan.warmup,
        lr=plan.lr,
        schedule="cosine",
        min_lr_ratio=0.1,
        eval_interval=0,
        progress=False,
    )
    return TrainConfig(**{**base, **overrides})


def curve(losses: list[float], points: int = 60) -> list[tuple[int, float]]:
    """A training-loss curve kept as ``points`` (end step, mean loss over the bin) pairs."""
    n = len(losses)
    edges = sorted({max(1, round(n * (i + 1) / points)) for i in range(points)})
    out, start = [], 0
    for end in edges:
        chunk = [v for v in losses[start:end] if math.isfinite(v)]
        if chunk:
            out.append((end, sum(chunk) / len(chunk)))
        start = end
    return out


def run(plan: RunPlan, *, eval_windows: int = 512, **overrides) -> dict:
    """Train one planned run and return its record: counts, FLOPs, tokens, losses, curve and time."""
    from ..train import train
    from .heldout import heldout_loss

    cfg = train_config(plan, **overrides)
    start = time.perf_counter()
    result = train(cfg)
    loss = heldout_loss(result.model, cfg, eval_windows)
    gpt = plan.shape.gpt_config(BLOCK_SIZE)
    return {
        "budget": plan.budget,
        "shape": asdict(plan.shape),
        "params": parameter_counts(gpt),
        "flops_per_token": flops_per_token(gpt),
        "steps": plan.steps,
        "warmup": plan.warmup,
        "lr": plan.lr,
        "tokens": plan.tokens,
        "flops": plan.flops,
        "loss": loss,
        "final_train_loss": sum(result.losses[-max(1, plan.steps // 20) :]) / max(1, plan.steps // 20),
        "epochs": result.epochs,
        "curve": curve(result.losses),
        "tokens_per_s": result.tokens_per_s,
        "train_seconds": result.seconds,
        "wall_seconds": time.perf_counter() - start,
        "load1": os.getloadavg()[0],  # the machine's load when the run ended: other work slows a run's clock
    }

"""Scaling laws (chapter 14): how large a model, trained on how many tokens, for a compute budget.

Modules, one mechanism each.  Imports go one way, down this list: a module may
import those above it, never one below::

    counting    Shape, parameter_counts (three ways), flops_per_token  (imports gputrain.flops, gputrain.model)
    heldout     heldout_loss: every run scored on the same spread held-out windows  (imports gputrain.train)
    sweep       LADDER, plan_sweep, RunPlan, run: an IsoFLOP sweep of the book's GPT  (imports gputrain.train)

Every name is re-exported here, so ``from gputrain.scaling import plan_sweep`` works.
"""

from .counting import COUNTS, Shape, attention_share, flops_per_token, parameter_counts, run_flops, tokens_per_parameter
from .heldout import heldout_loss, spread_indices
from .sweep import (
    BATCH_SIZE,
    BLOCK_SIZE,
    LADDER,
    SIZES_PER_BUDGET,
    TOKENS_PER_STEP,
    RunPlan,
    curve,
    peak_lr,
    plan_run,
    plan_sweep,
    run,
    train_config,
)

__all__ = [
    "COUNTS", "Shape", "attention_share", "flops_per_token", "parameter_counts", "run_flops", "tokens_per_parameter",
    "heldout_loss", "spread_indices",
    "BATCH_SIZE", "BLOCK_SIZE", "LADDER", "SIZES_PER_BUDGET", "TOKENS_PER_STEP", "RunPlan", "curve", "peak_lr",
    "plan_run", "plan_sweep", "run", "train_config",
]  # fmt: skip

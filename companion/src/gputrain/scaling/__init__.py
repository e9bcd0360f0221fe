"""Scaling laws (chapter 14): how large a model, trained on how many tokens, for a compute budget.

Modules, one mechanism each.  Imports go one way, down this list: a module may
import those above it, never one below::

    counting    Shape, parameter_counts (three ways), flops_per_token  (imports gputrain.flops, gputrain.model)
    heldout     heldout_loss: every run scored on the same spread held-out windows  (imports gputrain.train)
    sweep       LADDER, plan_sweep, RunPlan, run: an IsoFLOP sweep of the book's GPT  (imports gputrain.train)
    points      the recorded runs as arrays (N, D, C, L), grouped by budget; power_law
    bootstrap   Estimate, interval, case_resamples: percentile intervals of refits
    envelope    approach 1: the lowest training loss at each compute, and who reached it
    isoflop     approach 2: a parabola per budget, its vertex, power laws through them
    parametric  approach 3: L = E + A/N^alpha + B/D^beta, Huber on log L, L-BFGS from a grid
    laws        published laws (Chinchilla, Besiroglu), compute_optimal, gpu_seconds, law_from_results
    predict     fit_all (three approaches with intervals), predict_run (a larger run, before it trains)
    bill        published runs (DeepSeek-V3, Llama 3.1 405B): FLOPs, implied MFU, dollars

Every name is re-exported here, so ``from gputrain.scaling import plan_sweep`` works.
"""

from .bill import (
    DEEPSEEK_V3,
    GPU_HOUR_PRICE,
    LLAMA_31_405B,
    SECONDS_PER_HOUR,
    VCPU_HOUR_PRICE,
    TrainingRun,
    dollars_per_exaflop,
    dollars_per_million_tokens,
)
from .bootstrap import LEVEL, Estimate, bootstrap, case_resamples, estimates, interval
from .counting import COUNTS, Shape, attention_share, flops_per_token, parameter_counts, run_flops, tokens_per_parameter
from .envelope import bootstrap_envelope, envelope, envelope_fit, run_curve
from .heldout import heldout_loss, spread_indices
from .isoflop import Parabola, bootstrap_isoflop, fit_parabola, isoflop_fit
from .laws import BESIROGLU, CHINCHILLA, DEFAULT_MFU, EXPONENTS, LAWS, compute_optimal, gpu_seconds, law_from_results
from .parametric import (
    GRID,
    HUBER_DELTA,
    ORDER,
    LawFit,
    bootstrap_law,
    fit_law,
    grid_objectives,
    law_estimates,
    lbfgs,
    objective_and_gradient,
    theta_of,
)
from .points import arrays, by_budget, check_runs, power_law
from .predict import candidates, fit_all, predict_run
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
    "arrays", "by_budget", "check_runs", "power_law",
    "LEVEL", "Estimate", "bootstrap", "case_resamples", "estimates", "interval",
    "bootstrap_envelope", "envelope", "envelope_fit", "run_curve",
    "Parabola", "bootstrap_isoflop", "fit_parabola", "isoflop_fit",
    "GRID", "HUBER_DELTA", "ORDER", "LawFit", "bootstrap_law", "fit_law", "grid_objectives", "law_estimates", "lbfgs",
    "objective_and_gradient", "theta_of",
    "BESIROGLU", "CHINCHILLA", "DEFAULT_MFU", "EXPONENTS", "LAWS", "compute_optimal", "gpu_seconds", "law_from_results",
    "candidates", "fit_all", "predict_run",
    "DEEPSEEK_V3", "GPU_HOUR_PRICE", "LLAMA_31_405B", "SECONDS_PER_HOUR", "VCPU_HOUR_PRICE", "TrainingRun",
    "dollars_per_exaflop", "dollars_per_million_tokens",
]  # fmt: skip

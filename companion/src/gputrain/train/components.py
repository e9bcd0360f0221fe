"""Training components chosen by name (chapters 5 and 6): optimizers, schedules, mixed precision.

Each table below is the only place its names are spelled: ``TrainConfig``
validates against it and the ``gputrain train`` flags offer its keys as
choices.  The torch optimizers are what a run should use (torch's classes,
less the hooks that would import the compiler: :func:`_without_compiler_hooks`); the ``scratch-``
ones are chapter 5's from-scratch classes, so the same GPT can be trained
with the code the book explains and the curves compared.

A builder receives the run's configuration (a ``TrainConfig``, or anything
with the fields it reads); this module never imports ``config``, which
imports it for the tables.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn as nn

from .. import optim as scratch
from ..schedule import Multiplier, cyclic, warmup_constant, warmup_cosine, warmup_linear, wsd

Config = Any  # a TrainConfig: annotated loosely, since config.py imports this module and not the reverse


@dataclass(frozen=True)
class OptimizerChoice:
    build: Callable[[list[dict], Config], torch.optim.Optimizer]  # (param groups, cfg) -> optimizer
    about: str  # one line for --help and the docs


_COMPILER_WRAPPED = ("add_param_group", "zero_grad", "state_dict", "load_state_dict")  # and step


def _without_compiler_hooks(cls: type[torch.optim.Optimizer]) -> type[torch.optim.Optimizer]:
    """``cls`` with torch's own arithmetic and state, minus the wrappers that import ``torch._dynamo``.

    torch wraps ``add_param_group``, ``zero_grad``, ``state_dict``,
    ``load_state_dict`` and ``step`` so that ``torch.compile`` leaves them
    alone; each wrapper imports ``torch._dynamo`` when first called.  In a run
    that compiles nothing, that import is the run's largest cost after torch
    itself: 1.2 s and 75 MiB, or 1.3-2.5 s and 150 MiB where Triton is
    installed (it loads ``libtriton``), on the 2-core EPYC ("Making it fast").
    The subclass calls the same functions unwrapped (``inspect.unwrap``) and
    runs the step with gradients off, as the wrapper does: the same code, so
    the same bits (``tests/test_components.py``).  Where a torch release has no
    such wrapper, unwrapping returns the method itself.  Only the model is
    ever compiled (``--compile``), never the optimizer, so nothing is lost.
    """
    base, raw_step = torch.optim.Optimizer, inspect.unwrap(cls.step)

    def step(self, closure=None):
        with torch.set_grad_enabled(self.defaults.get("differentiable", False)):
            return raw_step(self, closure)

    methods = {name: inspect.unwrap(getattr(base, name)) for name in _COMPILER_WRAPPED}
    about = f"``torch.optim.{cls.__name__}`` without the wrappers that import ``torch._dynamo``: the run's own."
    return type(cls.__name__, (cls,), methods | {"step": step, "__module__": __name__, "__doc__": about})


AdamW, Adam, SGD = (_without_compiler_hooks(c) for c in (torch.optim.AdamW, torch.optim.Adam, torch.optim.SGD))


def _fused() -> bool:
    # one kernel updates every parameter on a GPU ("Making it fast"); on a CPU the plain
    # implementation is as fast and keeps results identical across torch builds
    return torch.cuda.is_available()


OPTIMIZERS: dict[str, OptimizerChoice] = {
    "adamw": OptimizerChoice(
        lambda g, c: AdamW(g, lr=c.lr, betas=(c.beta1, c.beta2), fused=_fused()),
        "torch.optim.AdamW, decoupled weight decay (the default)",
    ),
    "adam": OptimizerChoice(
        lambda g, c: Adam(g, lr=c.lr, betas=(c.beta1, c.beta2), fused=_fused()),
        "torch.optim.Adam, weight decay as an L2 term in the gradient",
    ),
    "sgd": OptimizerChoice(lambda g, c: SGD(g, lr=c.lr), "torch.optim.SGD, no momentum"),
    "momentum": OptimizerChoice(
        lambda g, c: SGD(g, lr=c.lr, momentum=c.beta1), "torch.optim.SGD with momentum beta1 (heavy ball)"
    ),
    "lion": OptimizerChoice(
        lambda g, c: scratch.Lion(g, lr=c.lr, betas=(c.beta1, c.beta2)),
        "Lion (from scratch, gputrain.optim.Lion: torch has none); use a 3-10x smaller lr",
    ),
    "muon": OptimizerChoice(
        lambda g, c: scratch.Muon(g, lr=c.lr, betas=(c.beta1, c.beta2), adjust_lr="match_rms_adamw", ns_dtype=None),
        "Muon (chapter 5, gputrain.optim.Muon): orthogonalised momentum for matrices, AdamW for the rest; "
        "AdamW-sized steps, so AdamW's lr is a start; its momentum is Muon's own 0.95, and beta1 and beta2 "
        "are the betas of its AdamW part",
    ),
    "scratch-adamw": OptimizerChoice(
        lambda g, c: scratch.AdamW(g, lr=c.lr, betas=(c.beta1, c.beta2)),
        "chapter 5's AdamW from scratch (gputrain.optim.AdamW)",
    ),
    "scratch-adam": OptimizerChoice(
        lambda g, c: scratch.Adam(g, lr=c.lr, betas=(c.beta1, c.beta2)), "chapter 5's Adam from scratch"
    ),
    "scratch-sgd": OptimizerChoice(lambda g, c: scratch.SGD(g, lr=c.lr), "chapter 5's SGD from scratch"),
    "scratch-momentum": OptimizerChoice(
        lambda g, c: scratch.Momentum(g, lr=c.lr, momentum=c.beta1), "chapter 5's heavy-ball momentum from scratch"
    ),
    "scratch-rmsprop": OptimizerChoice(
        lambda g, c: scratch.RMSprop(g, lr=c.lr, alpha=c.beta2),
        "chapter 5's RMSprop from scratch (beta2 is its smoothing alpha)",
    ),
}


@dataclass(frozen=True)
class ScheduleChoice:
    build: Callable[[Config], Multiplier]  # cfg -> lr multiplier per optimizer step (over cfg.schedule_length)
    about: str


SCHEDULES: dict[str, ScheduleChoice] = {
    "cosine": ScheduleChoice(
        lambda c: warmup_cosine(c.schedule_length, c.warmup_steps, c.min_lr_ratio),
        "warmup, then cosine decay to lr * min_lr_ratio (the default)",
    ),
    "constant": ScheduleChoice(lambda c: warmup_constant(c.warmup_steps, c.schedule_length), "warmup, then flat"),
    "linear": ScheduleChoice(
        lambda c: warmup_linear(c.schedule_length, c.warmup_steps, c.min_lr_ratio),
        "warmup, then a straight line down to lr * min_lr_ratio",
    ),
    "wsd": ScheduleChoice(
        lambda c: wsd(c.schedule_length, c.warmup_steps, c.decay_fraction, c.min_lr_ratio),
        "warmup, stable at lr, linear decay over the last decay_fraction of the steps",
    ),
    "cosine-restarts": ScheduleChoice(
        lambda c: cyclic(
            c.restart_steps or max(1, (c.schedule_length - c.warmup_steps) // 4),
            c.min_lr_ratio,
            warmup_steps=c.warmup_steps,
        ),
        "warmup, then cosine cycles of restart_steps that restart at lr (SGDR)",
    ),
}

# Accelerate's mixed-precision modes (chapter 7; fp8 in chapter 10): name -> what it needs
MIXED_PRECISION: dict[str, str] = {
    "no": "float32 everywhere",
    "bf16": "bfloat16 autocast (CPU or an Ampere+ GPU)",
    "fp16": "float16 autocast with loss scaling (CUDA)",
    "fp8": "FP8 matmuls through torchao/Transformer Engine (Ada/Hopper GPU)",
}


def choice_error(field: str, value: str, table: dict) -> ValueError:
    """The one error for an unknown name: it lists the allowed ones."""
    return ValueError(f"{field}={value!r} is not one of: {', '.join(table)}")


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices (and embeddings) only, never on biases and norm gains (chapter 6)."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]


def make_optimizer(model: nn.Module, cfg: Config) -> torch.optim.Optimizer:
    """``cfg.optimizer`` built over ``model``'s parameters, decay on matrices only."""
    return OPTIMIZERS[cfg.optimizer].build(param_groups(model, cfg.weight_decay), cfg)


def lr_lambda(cfg: Config) -> Multiplier:
    """Learning-rate multiplier per optimizer step for ``cfg.schedule``."""
    return SCHEDULES[cfg.schedule].build(cfg)

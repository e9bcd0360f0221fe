"""Learning-rate schedules: warmup + cosine, constant, linear, warmup-stable-decay, cosine with restarts.

Chapter 5 ("Warmup, cosine decay, restarts") explains them.  Each function
returns a *multiplier* ``f(step) -> float`` of the optimizer's base learning
rate, the form :class:`torch.optim.lr_scheduler.LambdaLR` expects::

    opt = gputrain.optim.AdamW(model.parameters(), lr=3e-4)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(total_steps=1000, warmup_steps=50))
    for step in range(1000):
        ...; opt.step(); sched.step()   # step k trains with lr = 3e-4 * f(k)

Steps count from 0.  Warmup is linear and reaches the full rate at its last
step: $f(k) = (k+1)/W$ for $k < W$ (so the very first step is not wasted at
zero).  ``tests/test_schedule.py`` checks every value against the closed forms
below and against PyTorch's ``CosineAnnealingLR`` and
``CosineAnnealingWarmRestarts`` where the two coincide.
"""

from __future__ import annotations

import math
from typing import Callable

Multiplier = Callable[[int], float]


def _check(total_steps: int, warmup_steps: int, min_ratio: float) -> None:
    if total_steps < 1:
        raise ValueError(f"total_steps={total_steps!r} must be >= 1")
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps={warmup_steps!r} must be >= 0")
    if warmup_steps > total_steps:
        raise ValueError(
            f"warmup_steps={warmup_steps} exceeds total_steps={total_steps}; shorten the warmup or train for more steps"
        )
    if not 0.0 <= min_ratio <= 1.0:
        raise ValueError(f"min_ratio={min_ratio!r} must be in [0, 1] (a fraction of the base learning rate)")


def _check_step(step: int) -> None:
    if step < 0:
        raise ValueError(f"step={step} must be >= 0 (steps count from 0)")


def _warmup(step: int, warmup_steps: int) -> float:
    """Linear warmup: 1/W, 2/W, ..., W/W = 1."""
    return (step + 1) / warmup_steps


def _cosine(progress: float, min_ratio: float) -> float:
    """Half a cosine from 1 (progress 0) down to ``min_ratio`` (progress 1)."""
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def warmup_cosine(total_steps: int, warmup_steps: int = 0, min_ratio: float = 0.0) -> Multiplier:
    r"""Linear warmup over ``warmup_steps``, then cosine decay to ``min_ratio`` at ``total_steps``.

    $$f(k) = \begin{cases} \dfrac{k+1}{W} & k < W \\[4pt]
      r + (1-r)\,\tfrac12\bigl(1 + \cos(\pi\, p)\bigr), \quad p = \min\!\bigl(1, \tfrac{k-W}{T-W}\bigr) & k \ge W
      \end{cases}$$

    With $W = 0$ it equals ``CosineAnnealingLR(T_max=T, eta_min=r * lr)`` for
    $k \le T$; after $T$ it stays at the floor $r$.  Chapter 5.
    """
    _check(total_steps, warmup_steps, min_ratio)

    def f(step: int) -> float:
        _check_step(step)
        if step < warmup_steps:
            return _warmup(step, warmup_steps)
        if step >= total_steps:  # past the end (also W == T, where there is no decay phase)
            return min_ratio
        return _cosine((step - warmup_steps) / (total_steps - warmup_steps), min_ratio)

    return f


def warmup_linear(total_steps: int, warmup_steps: int = 0, min_ratio: float = 0.0) -> Multiplier:
    r"""Linear warmup, then a straight line down to ``min_ratio`` at ``total_steps`` (and flat after).

    $$f(k) = r + (1-r)\,(1 - p), \quad p = \min\!\bigl(1, \tfrac{k-W}{T-W}\bigr) \quad (k \ge W)$$

    The original Transformer's and BERT's shape.  Chapter 5.
    """
    _check(total_steps, warmup_steps, min_ratio)

    def f(step: int) -> float:
        _check_step(step)
        if step < warmup_steps:
            return _warmup(step, warmup_steps)
        if step >= total_steps:
            return min_ratio
        return min_ratio + (1.0 - min_ratio) * (1.0 - (step - warmup_steps) / (total_steps - warmup_steps))

    return f


def wsd(total_steps: int, warmup_steps: int = 0, decay_fraction: float = 0.2, min_ratio: float = 0.0) -> Multiplier:
    r"""Warmup-stable-decay (MiniCPM, Hu et al. 2024): warm up, hold the full rate, decay only at the end.

    The last ``decay_fraction`` of the steps, $D = \lceil d\,T \rceil$, fall
    linearly from 1 to ``min_ratio``; before them the rate is flat at 1.  A run
    can be extended by continuing the stable phase and decaying later, which a
    cosine fixed to $T$ cannot do.  Chapter 5.
    """
    _check(total_steps, warmup_steps, min_ratio)
    if not 0.0 < decay_fraction <= 1.0:
        raise ValueError(f"decay_fraction={decay_fraction!r} must be in (0, 1] (the share of steps spent decaying)")
    decay_steps = min(math.ceil(decay_fraction * total_steps), total_steps - warmup_steps)
    decay_start = total_steps - decay_steps

    def f(step: int) -> float:
        _check_step(step)
        if step < warmup_steps:
            return _warmup(step, warmup_steps)
        if step >= total_steps:
            return min_ratio
        if step < decay_start or decay_steps == 0:
            return 1.0
        return min_ratio + (1.0 - min_ratio) * (1.0 - (step - decay_start) / decay_steps)

    return f


def warmup_constant(warmup_steps: int, total_steps: int | None = None) -> Multiplier:
    r"""Linear warmup over ``warmup_steps``, then the full rate forever: $f(k) = \min(1, (k+1)/W)$.

    ``total_steps``, if given, is only checked (warmup must fit inside it).
    Chapter 5.
    """
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps={warmup_steps!r} must be >= 0")
    if total_steps is not None:
        _check(total_steps, warmup_steps, 0.0)

    def f(step: int) -> float:
        _check_step(step)
        return _warmup(step, warmup_steps) if step < warmup_steps else 1.0

    return f


def cyclic(cycle_steps: int, min_ratio: float = 0.0, cycle_mult: int = 1, warmup_steps: int = 0) -> Multiplier:
    r"""Cosine decay that restarts at the full rate every cycle (SGDR, Loshchilov & Hutter 2017).

    Cycle $i$ lasts $T_i = T_0 \cdot m^i$ steps (``cycle_steps`` $T_0$,
    ``cycle_mult`` $m$).  With $t$ the step inside the current cycle,

    $$f = r + (1-r)\,\tfrac12\bigl(1 + \cos(\pi\, t / T_i)\bigr)$$

    so the rate falls to near $r$ and jumps back to 1: each restart kicks the
    weights out of the basin they were settling in.  An optional linear warmup
    comes before the first cycle.  With no warmup it equals
    ``CosineAnnealingWarmRestarts(T_0, T_mult, eta_min=r * lr)``.  Chapter 5.
    """
    _check(cycle_steps, 0, min_ratio)
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps={warmup_steps!r} must be >= 0")
    if cycle_mult < 1 or int(cycle_mult) != cycle_mult:
        raise ValueError(f"cycle_mult={cycle_mult!r} must be a whole number >= 1 (1: equal cycles, 2: doubling)")

    def f(step: int) -> float:
        _check_step(step)
        if step < warmup_steps:
            return _warmup(step, warmup_steps)
        t, length = step - warmup_steps, cycle_steps
        if cycle_mult == 1:
            t %= length  # equal cycles: position inside the current one
        while t >= length:  # growing cycles: walk past the finished ones (log many)
            t, length = t - length, length * cycle_mult
        return _cosine(t / length, min_ratio)

    return f


__all__ = ["warmup_cosine", "warmup_constant", "warmup_linear", "wsd", "cyclic"]

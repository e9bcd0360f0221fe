"""Experiments on small surfaces: many learning rates side by side, and when each run settles (chapter 5)."""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch
from torch.optim import Optimizer


def descend(
    loss_fn: Callable[[torch.Tensor], torch.Tensor],
    start: Sequence[float],
    make_optimizer: Callable[[list[dict]], Optimizer],
    lrs: Sequence[float],
    steps: int,
    grad_noise: float = 0.0,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run an optimizer from ``start`` once per learning rate, all runs side by side.  Chapter 5.

    ``loss_fn`` maps a batch of points ``(n, D)`` to their losses ``(n,)``;
    each learning rate gets its own point and its own parameter group, so one
    backward pass serves every run.  ``grad_noise`` adds Gaussian noise of that
    standard deviation to each gradient (a stand-in for mini-batch noise).
    Returns the paths ``(steps + 1, n, D)`` and losses ``(steps + 1, n)``, in float64.
    """
    points = [torch.tensor(list(start), dtype=torch.float64, requires_grad=True) for _ in lrs]
    opt = make_optimizer([{"params": [p], "lr": lr} for p, lr in zip(points, lrs)])
    gen = torch.Generator().manual_seed(seed)
    paths = torch.empty(steps + 1, len(lrs), len(points[0]), dtype=torch.float64)  # (S+1, n, D)
    losses = torch.empty(steps + 1, len(lrs), dtype=torch.float64)  # (S+1, n)
    for k in range(steps + 1):
        w = torch.stack(points)  # (n, D)
        loss = loss_fn(w)  # (n,)
        paths[k], losses[k] = w.detach(), loss.detach()
        if k == steps:
            break
        opt.zero_grad()
        loss.sum().backward()  # the runs do not interact: each point's gradient is its own loss's
        if grad_noise:
            for p in points:
                p.grad.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype), alpha=grad_noise)
        opt.step()
    return paths, losses


def steps_to(losses: torch.Tensor, tol: float) -> list[Optional[int]]:
    """Per run (column of ``losses``), the first step from which the loss stays below ``tol``.

    ``None`` for a run that never settles below it (too slow, or diverged to inf/NaN).
    Chapter 5.
    """
    below = torch.isfinite(losses) & (losses < tol)  # (S+1, n)
    stays = below.flip(0).cumprod(0).flip(0).bool()  # below now and at every later step
    return [int(col.nonzero()[0]) if col.any() else None for col in stays.T]

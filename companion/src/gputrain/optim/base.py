"""What every optimizer here shares: argument checks, the (parameter, gradient) walk, the state's bytes."""

from __future__ import annotations

from typing import Callable, Iterable, Optional

import torch
from torch.optim import Optimizer

Params = Iterable[torch.Tensor] | Iterable[dict]


# --- checks: one clear message per bad value --------------------------------------------


def _check_lr(lr: float) -> None:
    if not lr > 0:  # also rejects NaN
        raise ValueError(f"learning rate lr={lr!r} must be > 0; typical values are 1e-5 to 1e-1")


def _check_unit(name: str, value: float, hint: str = "common choices are 0.9 to 0.999") -> None:
    """A decay rate (beta, alpha, momentum, dampening) must lie in [0, 1)."""
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name}={value!r} must be in [0, 1); {hint}")


def _check_nonneg(name: str, value: float) -> None:
    if not value >= 0.0:
        raise ValueError(f"{name}={value!r} must be >= 0; use 0 to turn it off")


def _check_betas(betas: tuple[float, float]) -> None:
    if len(betas) != 2:
        raise ValueError(f"betas={betas!r} must be a pair (beta1, beta2), e.g. (0.9, 0.999)")
    _check_unit("betas[0]", betas[0])
    _check_unit("betas[1]", betas[1])


def _with_params(group: dict) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
    """The (parameter, gradient) pairs of a group, skipping parameters without a gradient."""
    for p in group["params"]:
        if p.grad is not None:
            if p.grad.is_sparse:
                raise ValueError("sparse gradients are not supported; use torch.optim.SparseAdam")
            yield p, p.grad


def _closure_loss(closure: Optional[Callable[[], float]]) -> Optional[float]:
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def state_bytes(optimizer: Optimizer) -> int:
    """Bytes held by the optimizer's state tensors (``state_dict()["state"]``).  Chapter 5.

    Plain SGD holds 0, momentum and RMSprop one buffer per parameter, Adam two:
    in fp32 that is 8 bytes per parameter on top of the model's 4.
    """
    total = 0
    for per_param in optimizer.state_dict()["state"].values():
        for value in per_param.values():
            if torch.is_tensor(value):
                total += value.numel() * value.element_size()
    return total

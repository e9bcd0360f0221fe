"""The engine's operations as functions, and the cross-entropy built from them (chapter 4).

``exp(x)`` is ``x.exp()`` and so on, for readers who prefer ``F.relu(x)`` to
``x.relu()``.  :func:`cross_entropy` has no derivative rule of its own: it is
assembled from log-softmax, a product and a sum, so its gradient comes out of
the chain rule.
"""

from __future__ import annotations

from typing import Iterable

import torch

from .tensor import Tensor


def exp(x: Tensor) -> Tensor:
    return x.exp()


def log(x: Tensor) -> Tensor:
    return x.log()


def tanh(x: Tensor) -> Tensor:
    return x.tanh()


def sigmoid(x: Tensor) -> Tensor:
    return x.sigmoid()


def relu(x: Tensor) -> Tensor:
    return x.relu()


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    return x.gelu(approximate)


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    return x.softmax(axis)


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    return x.log_softmax(axis)


def cross_entropy(logits: Tensor, targets: torch.Tensor) -> Tensor:
    """Mean of -log softmax(logits)[target] over the batch: logits (N, C), integer targets (N,).

    Built from the engine's own ops (log_softmax, mul, sum), so its gradient,
    (softmax - onehot) / N, comes out of the chain rule rather than being typed in.
    """
    targets = torch.as_tensor(targets, device=logits.data.device)
    if logits.data.dim() != 2 or targets.dim() != 1 or targets.shape[0] != logits.shape[0]:
        raise ValueError(
            f"cross_entropy needs logits (N, C) and targets (N,), got {logits.shape} and {tuple(targets.shape)}"
        )
    onehot = torch.nn.functional.one_hot(targets.long(), logits.shape[1]).to(logits.data.dtype)  # (N, C)
    return -(log_softmax(logits, axis=1) * onehot).sum() / logits.shape[0]


def zero_grad(params: Iterable[Tensor]) -> None:
    """Forget accumulated gradients before the next backward pass."""
    for p in params:
        p.zero_grad()

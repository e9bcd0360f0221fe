"""Cross-entropy and mean squared error from scratch, the contracts of ``F.cross_entropy`` and ``F.mse_loss``.

:func:`cross_entropy` takes class indices or probabilities, ``ignore_index``,
label smoothing and every reduction, built on the stable
:func:`~gputrain.loss.softmax.log_softmax`; :func:`perplexity` turns a loss in
nats into the number of equally likely choices (chapter 3).
"""

from __future__ import annotations

import math

import torch

from .softmax import log_softmax

REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction={reduction!r} is not supported; use one of: {', '.join(REDUCTIONS)}")


def _check_smoothing(label_smoothing: float) -> None:
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")


def _reduce(loss: torch.Tensor, reduction: str, denominator) -> torch.Tensor:
    if reduction == "none":
        return loss
    total = loss.sum()
    return total if reduction == "sum" else total / denominator


def cross_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """Cross-entropy from scratch, the same contract as ``F.cross_entropy`` (chapter 3).

    ``logits`` are (N, V), (N, V, d1, ...) or unbatched (V,); ``targets`` are
    class indices (N,) / (N, d1, ...) / () or class probabilities shaped like
    ``logits``.  Per example the loss is ``-log softmax(z)[y]``; with label
    smoothing ``eps`` the target is ``(1 - eps) * onehot(y) + eps / V``.
    ``mean`` divides by the number of targets that are not ``ignore_index``.
    """
    _check_reduction(reduction)
    _check_smoothing(label_smoothing)
    unbatched = logits.dim() == 1
    if unbatched:
        logits, targets = logits.unsqueeze(0), targets.unsqueeze(0)
    z = logits.movedim(1, -1)  # (N, d1.., V): PyTorch puts classes in dim 1, we want them last
    V = z.shape[-1]
    logp = log_softmax(z, dim=-1)  # (N, d1.., V)

    if targets.is_floating_point():  # class probabilities (soft labels)
        if targets.shape != logits.shape:
            raise ValueError(
                f"probability targets must have the logits' shape {tuple(logits.shape)}, "
                f"got {tuple(targets.shape)}; pass class indices as integers instead"
            )
        q = targets.movedim(1, -1)  # (N, d1.., V)
        if label_smoothing:
            q = q * (1 - label_smoothing) + label_smoothing / V
        loss = -(q * logp).sum(-1)  # (N, d1..)
        denominator = loss.numel()
    else:
        if targets.shape != z.shape[:-1]:
            raise ValueError(
                f"targets of shape {tuple(targets.shape)} do not match logits {tuple(logits.shape)}; "
                f"expected {tuple(z.shape[:-1])} (one class index per row)"
            )
        valid = targets != ignore_index  # (N, d1..)
        picked = targets[valid]
        if picked.numel() and (picked.min() < 0 or picked.max() >= V):
            raise ValueError(
                f"target {int(picked.min() if picked.min() < 0 else picked.max())} is outside "
                f"[0, {V}); fix the labels or pass ignore_index for padding"
            )
        safe = torch.where(valid, targets, torch.zeros_like(targets))  # ignored rows read class 0, then are zeroed
        nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)  # (N, d1..): -log p(correct class)
        if label_smoothing:
            nll = (1 - label_smoothing) * nll - label_smoothing * logp.mean(-1)
        loss = torch.where(valid, nll, torch.zeros_like(nll))
        denominator = valid.sum()
    loss = _reduce(loss, reduction, denominator)
    return loss.squeeze(0) if unbatched and reduction == "none" else loss


def mse_loss(input: torch.Tensor, target: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Mean squared error from scratch, the same contract as ``F.mse_loss`` (chapter 3)."""
    _check_reduction(reduction)
    if input.shape != target.shape:
        raise ValueError(
            f"input {tuple(input.shape)} and target {tuple(target.shape)} differ in shape; "
            "reshape them to match (silent broadcasting is a classic bug)"
        )
    return _reduce((input - target) ** 2, reduction, input.numel())


def perplexity(loss_nats) -> float:
    """``exp(mean cross-entropy in nats)``: the number of equally likely choices the model is torn between."""
    return math.exp(float(loss_nats))

"""Softmax the textbook way, which overflows, and the stable way, which cannot (chapter 3).

:func:`naive_softmax` and :func:`naive_cross_entropy` are the formula as it is
written on the board, kept only to show where it breaks; :func:`logsumexp` and
:func:`log_softmax` subtract each row's maximum first (the log-sum-exp trick),
so logits of +-1e4 in float32 are fine.
"""

from __future__ import annotations

import torch


def naive_softmax(logits: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The textbook ``exp(z) / sum(exp(z))``: overflows once a logit passes ln(max float).

    Only for the overflow demonstration of chapter 3; use :func:`log_softmax`.
    """
    e = logits.exp()  # inf once z > ln(max float): 11.09 in fp16, 88.72 in fp32
    return e / e.sum(dim, keepdim=True)  # inf / inf = nan


def naive_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean ``-log(naive_softmax(z)[y])`` over rows of (N, V) logits: the formula, unprotected."""
    p = naive_softmax(logits, dim=-1)  # (N, V)
    return -p.gather(-1, targets.unsqueeze(-1)).log().mean()


def _row_max(z: torch.Tensor, dim: int) -> torch.Tensor:
    """The maximum along ``dim`` (kept), as a constant: 0 where a row is all -inf."""
    m = z.detach().amax(dim, keepdim=True)  # no gradient needed: the results do not depend on m
    return torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # a row of all -inf stays -inf, not nan


def logsumexp(z: torch.Tensor, dim: int = -1, keepdim: bool = False) -> torch.Tensor:
    """``log(sum(exp(z)))`` computed as ``m + log(sum(exp(z - m)))`` with ``m = max(z)``.

    After subtracting the maximum every exponent is <= 0, so nothing overflows,
    and the largest term is exactly 1, so the sum cannot underflow to 0.
    """
    m = _row_max(z, dim)
    out = m + (z - m).exp().sum(dim, keepdim=True).log()
    return out if keepdim else out.squeeze(dim)


def log_softmax(z: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``log softmax(z) = (z - m) - log(sum(exp(z - m)))``: finite for any finite logits.

    Same algebra as ``z - logsumexp(z)``, but subtracting ``m`` first keeps the
    small differences between large logits exact (logits near 1e4 in float32).
    """
    shifted = z - _row_max(z, dim)
    return shifted - shifted.exp().sum(dim, keepdim=True).log()

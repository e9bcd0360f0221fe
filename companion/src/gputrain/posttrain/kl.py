"""Estimating KL(p || q) from samples of p: Schulman's k1, k2 and k3, and the exact KL to judge them (chapter 13).

RL fine-tuning keeps the policy p near a reference q with a KL penalty, but the
KL of two language models over whole replies cannot be summed exactly: it is
estimated from the tokens the policy sampled.  With x drawn from p and the log
ratio d = log q(x) - log p(x), three estimators (Schulman, "Approximating KL
divergence", 2020) are::

    k1 = -d                  unbiased, but negative for half the samples: high variance
    k2 = d^2 / 2             always >= 0, low variance, biased (exact only as q -> p)
    k3 = (e^d - 1) - d       unbiased (E_p[e^d] = 1), always >= 0, low variance

GRPO's KL term (DeepSeekMath, TRL's ``beta``) is k3 per token with p the
policy and q the reference.  :func:`estimator_stats` measures each estimator
against :func:`exact_kl` on two categorical distributions: its exact
expectation and variance (summed over the categories) and a seeded sample's
mean and variance, which is what a figure of bias and spread needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def kl_k1(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """Per-sample k1 = log p(x) - log q(x), for x drawn from p."""
    return logp - logq


def kl_k2(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """Per-sample k2 = (log q(x) - log p(x))^2 / 2, for x drawn from p."""
    return 0.5 * (logq - logp) ** 2


def kl_k3(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """Per-sample k3 = q(x)/p(x) - 1 - log(q(x)/p(x)), for x drawn from p (GRPO's per-token KL)."""
    d = logq - logp
    return torch.exp(d) - d - 1


KL_ESTIMATORS = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}


def _check_distributions(p: torch.Tensor, q: torch.Tensor) -> None:
    if p.shape != q.shape or p.dim() < 1:
        raise ValueError(f"p and q must be probability vectors of one shape, got {tuple(p.shape)} and {tuple(q.shape)}")
    for name, t in (("p", p), ("q", q)):
        if bool((t < 0).any()) or not torch.allclose(t.sum(-1), torch.ones((), dtype=t.dtype), atol=1e-6):
            raise ValueError(f"{name} must be non-negative and sum to 1 along its last axis")
    if bool(((p > 0) & (q == 0)).any()):
        raise ValueError("q is 0 where p is not, so KL(p || q) is infinite; give q some mass everywhere p has")


def exact_kl(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """KL(p || q) = sum_i p_i log(p_i / q_i) of categorical distributions along the last axis (0 log 0 = 0)."""
    _check_distributions(p, q)
    terms = torch.where(p > 0, p * (torch.log(p) - torch.log(q)), torch.zeros_like(p))
    return terms.sum(-1)


@dataclass(frozen=True)
class EstimatorStats:
    """One KL estimator judged on two categorical distributions: exact moments and a sample's."""

    name: str
    kl: float  # the exact KL(p || q)
    expected: float  # E_p[k], summed exactly over the categories
    variance: float  # Var_p[k] of one sample, exact
    sample_mean: float  # the mean of ``samples`` draws
    sample_variance: float  # their variance (ddof 1)
    samples: int

    @property
    def bias(self) -> float:
        """E_p[k] - KL: 0 for k1 and k3, positive or negative for k2."""
        return self.expected - self.kl

    @property
    def standard_error(self) -> float:
        """The standard error of the sample mean, from the exact per-sample variance."""
        return (self.variance / self.samples) ** 0.5


def estimator_stats(p, q, samples: int = 10_000, seed: int = 0) -> dict[str, EstimatorStats]:
    """Each estimator of KL(p || q) (:data:`KL_ESTIMATORS`) on categorical p and q: exact moments and a seeded sample.

    ``p`` and ``q``: probability vectors (K,) (lists or tensors), computed in
    float64.  The sample draws ``samples`` categories from p with a generator
    seeded by ``seed``; every estimator sees the same draws.
    """
    p = torch.as_tensor(p, dtype=torch.float64)
    q = torch.as_tensor(q, dtype=torch.float64)
    _check_distributions(p, q)
    if p.dim() != 1 or isinstance(samples, bool) or not isinstance(samples, int) or samples < 2:
        raise ValueError("estimator_stats needs probability vectors (K,) and samples >= 2")
    kl = float(exact_kl(p, q))
    support = p > 0
    logp, logq = torch.log(p[support]), torch.log(q[support])
    weight = p[support]
    draws = torch.multinomial(p, samples, replacement=True, generator=torch.Generator().manual_seed(seed))
    out = {}
    for name, k in KL_ESTIMATORS.items():
        values = k(logp, logq)  # (K',): the estimate each category gives
        mean = float((weight * values).sum())
        variance = float((weight * (values - mean) ** 2).sum())
        drawn = k(torch.log(p[draws]), torch.log(q[draws]))  # (samples,)
        out[name] = EstimatorStats(name, kl, mean, variance, float(drawn.mean()), float(drawn.var()), samples)
    return out

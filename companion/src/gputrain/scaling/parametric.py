"""Chinchilla's third approach (chapter 14): ``L(N, D) = E + A / N^alpha + B / D^beta`` fitted to every run.

Written from Hoffmann et al. (2022), section 3.3 and appendix D.2: the
parameters are ``(a, b, e, alpha, beta)`` with ``A = exp(a)``, ``B = exp(b)``,
``E = exp(e)``, the prediction is ``log L = LSE(a - alpha log N, b - beta log D, e)``,
and the objective is the Huber loss (delta = 1e-3) between that and the
measured ``log L``, summed over the runs.  The paper runs L-BFGS from every
point of a grid and keeps the best; here the whole grid is scored at once
(NumPy) and L-BFGS (``torch.optim.LBFGS``, float64) starts from its best
points, which finds the same minimum for a fraction of the work.

Minimizing L at fixed compute ``C = 6 N D`` gives the paper's equation 4:
``N_opt = G (C/6)^a``, ``D_opt = (C/6)^b / G`` with ``a = beta / (alpha + beta)``,
``b = alpha / (alpha + beta)`` and ``G = (alpha A / (beta B))^(1 / (alpha + beta))``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass

import numpy as np
import torch

from .bootstrap import Estimate, case_resamples, estimates

HUBER_DELTA = 1e-3
# the paper's grid of starts (appendix D.2): 5 x 5 x 5 x 6 x 6 = 4,500 points
GRID = {
    "alpha": np.arange(0.0, 2.01, 0.5),
    "beta": np.arange(0.0, 2.01, 0.5),
    "e": np.arange(-1.0, 1.01, 0.5),
    "a": np.arange(0.0, 25.1, 5.0),
    "b": np.arange(0.0, 25.1, 5.0),
}
ORDER = ("a", "b", "e", "alpha", "beta")  # the order of a parameter vector


@dataclass(frozen=True)
class LawFit:
    """A fitted ``L(N, D) = E + A / N^alpha + B / D^beta``, with what it implies at fixed compute."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float
    objective: float = math.nan  # the Huber objective at the fit

    def loss(self, N, D):
        return self.E + self.A / np.power(N, self.alpha) + self.B / np.power(D, self.beta)

    @property
    def a(self) -> float:
        """The exponent of N_opt ~ C^a."""
        return self.beta / (self.alpha + self.beta)

    @property
    def b(self) -> float:
        """The exponent of D_opt ~ C^b."""
        return self.alpha / (self.alpha + self.beta)

    def optimal(self, C) -> tuple[float, float]:
        """Compute-optimal ``(N, D)`` for ``C`` FLOPs under ``C = 6 N D`` (the paper's equation 4)."""
        G = (self.alpha * self.A / (self.beta * self.B)) ** (1 / (self.alpha + self.beta))
        return G * (C / 6) ** self.a, (C / 6) ** self.b / G

    def constants(self) -> dict[str, float]:
        return {"E": self.E, "A": self.A, "B": self.B, "alpha": self.alpha, "beta": self.beta, "a": self.a, "b": self.b}

    def as_dict(self) -> dict:
        return asdict(self)


def _huber(r, delta: float = HUBER_DELTA):
    """Elementwise Huber loss (NumPy or torch): quadratic inside ``delta``, linear outside."""
    absr = abs(r)
    return np.where(absr <= delta, 0.5 * r * r, delta * (absr - 0.5 * delta))


def grid_objectives(logN, logD, logL, grid: dict = GRID) -> tuple[np.ndarray, np.ndarray]:
    """Every grid point as a parameter row (in :data:`ORDER`) and its Huber objective."""
    theta = np.array(list(itertools.product(*(grid[k] for k in ORDER))), dtype=float)
    a, b, e, alpha, beta = (theta[:, i : i + 1] for i in range(5))
    terms = np.stack([a - alpha * logN, b - beta * logD, np.broadcast_to(e, (len(theta), len(logN)))])
    pred = np.logaddexp.reduce(terms, axis=0)
    return theta, _huber(pred - logL).sum(axis=1)


def objective_and_gradient(theta, logN, logD, logL, weights=None) -> tuple[float, np.ndarray]:
    """The Huber objective at ``theta`` (in :data:`ORDER`) and its gradient, written out by hand.

    With ``p`` the softmax of the three terms, ``d log L_hat / d(a, b, e) = p`` and
    ``d / d(alpha, beta) = -p_1 log N, -p_2 log D``; the Huber loss's slope is ``r``
    clipped to ``[-delta, delta]``.
    """
    a, b, e, alpha, beta = theta
    terms = np.stack([a - alpha * logN, b - beta * logD, np.full_like(logN, e)])  # (3, n)
    top = terms.max(axis=0)
    ex = np.exp(terms - top)
    pred = top + np.log(ex.sum(axis=0))
    p = ex / ex.sum(axis=0)
    r = pred - logL
    w = np.ones_like(r) if weights is None else weights
    slope = w * np.clip(r, -HUBER_DELTA, HUBER_DELTA)
    grad = np.array([slope @ p[0], slope @ p[1], slope @ p[2], -(slope * p[0]) @ logN, -(slope * p[1]) @ logD])
    return float((w * _huber(r)).sum()), grad


def lbfgs(theta0, logN, logD, logL, weights=None, max_iter: int = 200) -> tuple[np.ndarray, float]:
    """``torch.optim.LBFGS`` (strong Wolfe line search, float64) from ``theta0``; the end point and its objective.

    The objective and its gradient come from :func:`objective_and_gradient`
    (NumPy, no autograd graph: five parameters and a few dozen points).
    """
    theta = torch.tensor(np.asarray(theta0, float), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS(
        [theta], lr=1.0, max_iter=max_iter, tolerance_grad=1e-9, tolerance_change=1e-12, line_search_fn="strong_wolfe"
    )

    def closure():
        f, g = objective_and_gradient(theta.detach().numpy(), logN, logD, logL, weights)
        theta.grad = torch.from_numpy(g / HUBER_DELTA)  # scaled: the tolerances see numbers near 1
        return torch.tensor(f / HUBER_DELTA, dtype=torch.float64)

    opt.step(closure)
    th = theta.detach().numpy().copy()
    return th, objective_and_gradient(th, logN, logD, logL, weights)[0]


def _law(th) -> LawFit:
    a, b, e, alpha, beta = (float(v) for v in th)
    return LawFit(E=math.exp(e), A=math.exp(a), B=math.exp(b), alpha=alpha, beta=beta)


def _logs(N, D, L) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    N, D, L = (np.asarray(x, dtype=float) for x in (N, D, L))
    if not (len(N) == len(D) == len(L) >= 5) or not np.all(np.isfinite(np.log(np.concatenate([N, D, L])))):
        raise ValueError("fit_law needs at least 5 positive, finite (N, D, L) points of equal length")
    return np.log(N), np.log(D), np.log(L)


def _best(theta, obj) -> tuple[np.ndarray, float]:
    ok = np.all(np.isfinite(theta), axis=1) & np.isfinite(obj)
    if not ok.any():
        raise ValueError("L-BFGS found no finite minimum from any start")
    i = np.flatnonzero(ok)[np.argmin(obj[ok])]
    return theta[i], float(obj[i])


def fit_law(N, D, L, starts: int = 8) -> LawFit:
    """The parametric fit of losses ``L`` at sizes ``N`` and tokens ``D``: L-BFGS from the best grid points."""
    logN, logD, logL = _logs(N, D, L)
    theta, obj = grid_objectives(logN, logD, logL)
    ends = [lbfgs(t0, logN, logD, logL) for t0 in theta[np.argsort(obj)[:starts]]]
    th, best = _best(np.stack([e[0] for e in ends]), np.array([e[1] for e in ends]))
    return LawFit(**{**_law(th).__dict__, "objective": best})


def theta_of(fit: LawFit) -> np.ndarray:
    """The fit as a parameter vector in :data:`ORDER` (a warm start for refits)."""
    return np.array([math.log(fit.A), math.log(fit.B), math.log(fit.E), fit.alpha, fit.beta])


def bootstrap_law(N, D, L, n_boot: int = 200, seed: int = 0, grid_start: bool = True) -> tuple[LawFit, list[LawFit]]:
    """The fit on all points, and ``n_boot`` refits on resamples of the points (whole runs, with replacement).

    A resample is a weight per point (how often it was drawn).  Each refit runs
    L-BFGS from the full fit and (``grid_start``) from its own best grid point,
    and keeps the lower objective.
    """
    logN, logD, logL = _logs(N, D, L)
    full = fit_law(N, D, L)
    theta, _ = grid_objectives(logN, logD, logL)
    boots = []
    for rows in case_resamples(len(logN), n_boot, seed):
        w = np.bincount(rows, minlength=len(logN)).astype(float)
        starts = [theta_of(full)]
        if grid_start:
            starts.append(theta[np.argmin(_grid_weighted(theta, logN, logD, logL, w))])
        ends = [lbfgs(t0, logN, logD, logL, w) for t0 in starts]
        th, _ = _best(np.stack([e[0] for e in ends]), np.array([e[1] for e in ends]))
        boots.append(_law(th))
    return full, boots


def _grid_weighted(theta, logN, logD, logL, w) -> np.ndarray:
    a, b, e, alpha, beta = (theta[:, i : i + 1] for i in range(5))
    terms = np.stack([a - alpha * logN, b - beta * logD, np.broadcast_to(e, (len(theta), len(logN)))])
    return (_huber(np.logaddexp.reduce(terms, axis=0) - logL) * w).sum(axis=1)


def law_estimates(full: LawFit, boots: list[LawFit]) -> dict[str, Estimate]:
    """Intervals for E, A, B, alpha, beta and the exponents a and b."""
    return estimates(full.constants(), [b.constants() for b in boots])

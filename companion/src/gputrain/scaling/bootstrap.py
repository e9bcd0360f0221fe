"""Bootstrap intervals (chapter 14): how far a fitted constant would move if the sweep were run again.

Besiroglu et al. (2024) refitted Chinchilla's third approach from the
paper's own points and found intervals far wider than the ones published: a
fit without its interval says less than it seems to.  Every constant the
chapter fits comes with an :class:`Estimate`, the point fit and the
percentile interval of the same fit repeated on resampled data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

LEVEL = 0.95  # the intervals' coverage


@dataclass(frozen=True)
class Estimate:
    """A fitted value and its bootstrap percentile interval."""

    value: float
    lo: float
    hi: float
    samples: int  # bootstrap fits the interval comes from

    def contains(self, x: float) -> bool:
        return self.lo <= x <= self.hi

    def as_dict(self) -> dict:
        return {"value": self.value, "lo": self.lo, "hi": self.hi, "samples": self.samples}

    def __format__(self, spec: str) -> str:
        spec = spec or ".3g"
        return f"{self.value:{spec}} [{self.lo:{spec}}, {self.hi:{spec}}]"


def interval(value: float, samples: Sequence[float], level: float = LEVEL) -> Estimate:
    """The percentile interval of ``samples`` (non-finite ones dropped) around the point fit ``value``."""
    s = np.asarray([x for x in samples if np.isfinite(x)], dtype=float)
    if len(s) < 10:
        raise ValueError(f"{len(s)} finite bootstrap samples are too few for an interval; resample more")
    tail = (1 - level) / 2
    lo, hi = np.quantile(s, [tail, 1 - tail])
    return Estimate(float(value), float(lo), float(hi), len(s))


def case_resamples(n: int, n_boot: int, seed: int = 0) -> np.ndarray:
    """``n_boot`` rows of ``n`` indices drawn with replacement: resampling whole runs."""
    if n < 2 or n_boot < 1:
        raise ValueError("resampling needs at least 2 items and 1 bootstrap sample")
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


def estimates(point: dict[str, float], boot: list[dict[str, float]], level: float = LEVEL) -> dict[str, Estimate]:
    """An :class:`Estimate` for every key of the point fit, from the same keys of the bootstrap fits."""
    return {k: interval(v, [b[k] for b in boot], level) for k, v in point.items()}


def bootstrap(fit: Callable[[np.ndarray], dict[str, float]], n: int, n_boot: int, seed: int = 0) -> list[dict]:
    """``fit(indices)`` on ``n_boot`` case resamples of ``range(n)``; a resample the fit rejects is skipped."""
    out = []
    for rows in case_resamples(n, n_boot, seed):
        try:
            out.append(fit(rows))
        except ValueError:
            continue
    return out

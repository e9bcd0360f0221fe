"""The recorded runs of a sweep as arrays (chapter 14): N (counted one of three ways), D, C and the loss.

A run record is what :func:`gputrain.scaling.run` returns and the results file
stores; the fits read only the fields named here, so a fit can be checked on
runs that were never trained (synthetic records from known constants).
"""

from __future__ import annotations

import math

import numpy as np

from .counting import COUNTS


def check_runs(runs) -> None:
    """One clear error for records a fit cannot use."""
    if not isinstance(runs, (list, tuple)) or len(runs) < 5:
        raise ValueError("a scaling fit needs a list of at least 5 run records (budget, params, tokens, flops, loss)")
    for i, r in enumerate(runs):
        try:
            values = [r["budget"], r["tokens"], r["flops"], r["loss"], *(r["params"][k] for k in COUNTS)]
        except (KeyError, TypeError):
            raise ValueError(f"run {i} lacks budget, tokens, flops, loss or params {COUNTS}") from None
        if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in values):
            raise ValueError(f"run {i} has a value that is not a positive finite number: {values}")


def arrays(runs, count: str = "total") -> dict[str, np.ndarray]:
    """``N`` (counted as ``count``), ``D`` (tokens), ``C`` (FLOPs done), ``L`` (held-out loss) and ``budget``."""
    if count not in COUNTS:
        raise ValueError(f"count must be one of {COUNTS}, got {count!r}")
    check_runs(runs)
    return {
        "N": np.array([r["params"][count] for r in runs], dtype=float),
        "D": np.array([r["tokens"] for r in runs], dtype=float),
        "C": np.array([r["flops"] for r in runs], dtype=float),
        "L": np.array([r["loss"] for r in runs], dtype=float),
        "budget": np.array([r["budget"] for r in runs], dtype=float),
    }


def by_budget(runs) -> dict[float, list[int]]:
    """Indices of the runs of each budget, budgets in increasing order."""
    groups: dict[float, list[int]] = {}
    for i, r in enumerate(runs):
        groups.setdefault(float(r["budget"]), []).append(i)
    return dict(sorted(groups.items()))


def power_law(x, y) -> tuple[float, float]:
    """Least squares of ``ln y = slope ln x + intercept``: the exponent and the log prefactor."""
    lx, ly = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    if len(lx) < 2 or np.ptp(lx) == 0:
        raise ValueError("a power law needs at least two distinct x values")
    slope, intercept = np.polyfit(lx, ly, 1)
    return float(slope), float(intercept)

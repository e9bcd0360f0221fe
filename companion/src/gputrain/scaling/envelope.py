"""Chinchilla's first approach (chapter 14): the lower envelope of all the training curves.

Every run's training loss is recorded along the way, so each point of its
curve is a (FLOPs so far, loss) pair.  For each compute C on a grid, the
lowest loss any run reached at C (interpolated in ln C) marks the best size
for C; power laws through those sizes (and through ``D = C / (6N + 12LTC)``
tokens) give ``a`` and ``b`` (Hoffmann et al. 2022, section 3.1).  A curve's
middle is not the end of a run of that length (its cosine has not decayed
yet), which biases the envelope towards runs that happen to end at C.
"""

from __future__ import annotations

import numpy as np

from .bootstrap import Estimate, bootstrap, estimates
from .counting import COUNTS
from .points import check_runs, power_law


def run_curve(run: dict) -> tuple[np.ndarray, np.ndarray]:
    """A run's curve as (FLOPs at each bin's middle step, mean training loss of the bin)."""
    per_step = run["flops"] / run["steps"]
    ends = np.array([s for s, _ in run["curve"]], dtype=float)
    starts = np.concatenate([[0.0], ends[:-1]])
    return (starts + ends) / 2 * per_step, np.array([v for _, v in run["curve"]], dtype=float)


def envelope(runs, count: str = "total", points: int = 25) -> dict:
    """The lowest loss at each of ``points`` computes from the smallest budget to the end of the longest curve."""
    check_runs(runs)
    if count not in COUNTS:
        raise ValueError(f"count must be one of {COUNTS}, got {count!r}")
    curves = [run_curve(r) for r in runs]
    top = max(c[-1] for c, _ in curves)  # the last bin's middle of the longest run
    grid = np.geomspace(min(r["budget"] for r in runs), top, points)
    out = {"C": [], "L": [], "N": [], "D": []}
    for C in grid:
        best, who = np.inf, None
        for r, (c, loss) in zip(runs, curves):
            if c[0] <= C <= c[-1] * (1 + 1e-9):
                value = float(np.interp(np.log(C), np.log(c), loss))
                if value < best:
                    best, who = value, r
        if who is not None:
            out["C"].append(float(C))
            out["L"].append(best)
            out["N"].append(who["params"][count])
            out["D"].append(float(C) / who["flops_per_token"])
    return out


def envelope_fit(runs, count: str = "total", points: int = 25) -> dict:
    """The envelope and the exponents a (N_opt ~ C^a) and b (D_opt ~ C^b) through it."""
    env = envelope(runs, count, points)
    if len(set(env["N"])) < 2:
        raise ValueError("one size holds the whole envelope: no exponent can be fitted")
    env["a"], env["log_kN"] = power_law(env["C"], env["N"])
    env["b"], env["log_kD"] = power_law(env["C"], env["D"])
    return env


def bootstrap_envelope(
    runs, count: str = "total", n_boot: int = 200, seed: int = 0, points: int = 25
) -> tuple[dict, dict[str, Estimate]]:
    """The envelope fit, and intervals for a and b from resampling whole runs."""
    point = envelope_fit(runs, count, points)

    def refit(rows):
        fit = envelope_fit([runs[i] for i in rows], count, points)
        return {"a": fit["a"], "b": fit["b"]}

    boots = bootstrap(refit, len(runs), n_boot, seed)
    return point, estimates({"a": point["a"], "b": point["b"]}, boots)

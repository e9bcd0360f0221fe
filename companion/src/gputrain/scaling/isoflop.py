"""Chinchilla's second approach (chapter 14): a parabola through each IsoFLOP curve, and its minimum.

At one compute budget the loss against ``ln N`` is close to a parabola near
its bottom; its vertex is that budget's optimal size, and the loss against
``ln D`` gives the optimal tokens the same way.  Power laws through the
vertices give the exponents ``N_opt ~ C^a`` and ``D_opt ~ C^b`` (Hoffmann et
al. 2022, section 3.2).  A vertex outside the sizes a budget trained is an
extrapolation, and :func:`isoflop_fit` says so for each budget.

The intervals come from a residual bootstrap: each parabola's fitted losses
plus residuals drawn from all the parabolas' residuals, every curve refitted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .bootstrap import Estimate, estimates
from .points import arrays, by_budget, power_law


@dataclass(frozen=True)
class Parabola:
    """``loss = c2 x^2 + c1 x + c0`` with ``x = ln v`` (v a size or a token count)."""

    c2: float
    c1: float
    c0: float

    @property
    def vertex(self) -> float:
        """The v at the bottom of the parabola."""
        return math.exp(-self.c1 / (2 * self.c2))

    @property
    def bottom(self) -> float:
        """The loss at the bottom."""
        return self.c0 - self.c1**2 / (4 * self.c2)

    def __call__(self, v):
        x = np.log(v)
        return self.c2 * x * x + self.c1 * x + self.c0


def fit_parabola(v, loss) -> Parabola:
    """Least-squares parabola of ``loss`` against ``ln v``; one clear error when it has no bottom."""
    x, y = np.log(np.asarray(v, float)), np.asarray(loss, float)
    if len(np.unique(x)) < 3:
        raise ValueError("a parabola needs at least three distinct sizes")
    c2, c1, c0 = np.polyfit(x, y, 2)
    if not c2 > 0:
        raise ValueError("the IsoFLOP curve bends down (no minimum): sample sizes on both sides of the optimum")
    return Parabola(float(c2), float(c1), float(c0))


def _vertex(v, loss) -> Parabola | None:
    try:
        return fit_parabola(v, loss)
    except ValueError:  # bends down: no minimum
        return None


def _minima(N, D, L, groups: dict[float, list[int]]) -> dict:
    out = {"budget": [], "N_opt": [], "D_opt": [], "L_min": [], "inside": []}
    for budget, rows in groups.items():
        pn, pd = _vertex(N[rows], L[rows]), _vertex(D[rows], L[rows])
        if pn is None or pd is None:
            out["budget"].append(budget)
            out["N_opt"].append(math.nan)
            out["D_opt"].append(math.nan)
            out["L_min"].append(math.nan)
            out["inside"].append(False)
            continue
        out["budget"].append(budget)
        out["N_opt"].append(pn.vertex)
        out["D_opt"].append(pd.vertex)
        out["L_min"].append(pn.bottom)
        out["inside"].append(bool(N[rows].min() <= pn.vertex <= N[rows].max()))
    return out


def _slopes(m: dict, used: list[bool]) -> tuple[float, float, float, float]:
    pick = lambda key: [v for v, ok in zip(m[key], used) if ok]  # noqa: E731
    if sum(used) < 2:
        raise ValueError("fewer than two budgets have their minimum inside the sizes they trained")
    return (*power_law(pick("budget"), pick("N_opt")), *power_law(pick("budget"), pick("D_opt")))


def isoflop_fit(runs, count: str = "total") -> dict:
    """Each budget's parabola minimum, and the exponents a and b of the power laws through the minima.

    Only budgets whose minimum lies inside the sizes they trained enter the
    power laws (``used``): a vertex outside them is an extrapolation of a
    parabola, and one that bends the wrong way has no minimum at all.
    """
    p = arrays(runs, count)
    out = _minima(p["N"], p["D"], p["L"], by_budget(runs))
    out["used"] = list(out["inside"])
    out["a"], out["log_kN"], out["b"], out["log_kD"] = _slopes(out, out["used"])
    return out


def bootstrap_isoflop(runs, count: str = "total", n_boot: int = 200, seed: int = 0) -> tuple[dict, dict[str, Estimate]]:
    """The fit, and intervals for a, b and each budget's optimum from a residual bootstrap."""
    p, groups = arrays(runs, count), by_budget(runs)
    point = isoflop_fit(runs, count)
    fitted, resid = np.empty_like(p["L"]), np.empty_like(p["L"])
    for rows in groups.values():
        fitted[rows] = np.polyval(np.polyfit(np.log(p["N"][rows]), p["L"][rows], 2), np.log(p["N"][rows]))
    resid = p["L"] - fitted
    resid *= math.sqrt(len(resid) / (len(resid) - 3 * len(groups)))  # undo the shrinking by the fitted parameters
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        L = fitted + rng.choice(resid, size=len(resid), replace=True)
        m = _minima(p["N"], p["D"], L, groups)
        if not all(np.isfinite(m["N_opt"][i]) for i, ok in enumerate(point["used"]) if ok):
            continue  # a used budget lost its minimum in this resample
        a, _, b, _ = _slopes(m, point["used"])
        boots.append({"a": a, "b": b} | {f"N_opt[{i}]": n for i, n in enumerate(m["N_opt"]) if point["used"][i]})
    keys = {"a": point["a"], "b": point["b"]}
    keys |= {f"N_opt[{i}]": n for i, n in enumerate(point["N_opt"]) if point["used"][i]}
    return point, estimates(keys, boots)

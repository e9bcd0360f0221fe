"""Prediction before measurement (chapter 14): all three fits of a sweep, and the loss of a larger run.

:func:`fit_all` runs Chinchilla's three approaches on the recorded runs, each
with bootstrap intervals; :func:`predict_run` then picks, among the ladder's
sizes, the one the parametric law says is best for a new budget (using no
more tokens than the corpus holds, so that no data repeats) and predicts its
loss, with the interval the bootstrap laws give at that point.  The record
script stores both *before* it trains the run.
"""

from __future__ import annotations

import numpy as np

from .bootstrap import interval
from .counting import parameter_counts
from .envelope import bootstrap_envelope
from .isoflop import bootstrap_isoflop
from .parametric import LawFit, bootstrap_law, law_estimates
from .points import arrays
from .sweep import BLOCK_SIZE, LADDER, plan_run


def _plain(d: dict) -> dict:
    """A fit's dict with NumPy scalars turned into floats (for JSON)."""
    return {k: (float(v) if isinstance(v, (np.floating, float)) else v) for k, v in d.items()}


def _approach(fit, runs, count: str, n_boot: int, seed: int) -> dict:
    """One approach's fit and intervals, or why it could not be fitted (the other approaches still are)."""
    try:
        point, est = fit(runs, count, n_boot, seed)
    except ValueError as exc:  # e.g. no budget with its minimum inside the sizes it trained
        return {"error": str(exc)}
    return {"fit": _plain(point), "estimates": {k: e.as_dict() for k, e in est.items()}}


def fit_all(runs, count: str = "total", n_boot: int = 200, seed: int = 0) -> dict:
    """The three approaches' fits and intervals, as JSON-ready dicts; the parametric one keeps its bootstrap laws.

    Approaches 1 and 2 that cannot be fitted (too few sizes bracket a minimum)
    are stored as ``{"error": why}``; the prediction needs only approach 3.
    """
    p = arrays(runs, count)
    law, boots = bootstrap_law(p["N"], p["D"], p["L"], n_boot, seed)
    return {
        "count": count,
        "n_boot": n_boot,
        "seed": seed,
        "envelope": _approach(bootstrap_envelope, runs, count, n_boot, seed),
        "isoflop": _approach(bootstrap_isoflop, runs, count, n_boot, seed),
        "parametric": {
            "law": law.as_dict(),
            "estimates": {k: e.as_dict() for k, e in law_estimates(law, boots).items()},
            "boots": [b.as_dict() for b in boots],
        },
    }


def candidates(law: LawFit, budget: float, max_tokens: float | None = None, ladder=LADDER, count: str = "total"):
    """Each ladder size's run at ``budget``: tokens, N, predicted loss, and whether its data would repeat."""
    out = []
    for shape in ladder:
        plan = plan_run(shape, budget)
        N = parameter_counts(shape.gpt_config(BLOCK_SIZE))[count]
        out.append({
            "shape": shape.__dict__, "label": shape.label, "N": N, "tokens": plan.tokens, "steps": plan.steps,
            "loss": float(law.loss(N, plan.tokens)), "repeats": bool(max_tokens and plan.tokens > max_tokens),
        })  # fmt: skip
    return out


def predict_run(fits: dict, budget: float, max_tokens: float | None = None, ladder=LADDER) -> dict:
    """The ladder size the stored parametric law prefers at ``budget`` (data not repeated), and its predicted loss."""
    law = LawFit(**fits["parametric"]["law"])
    boots = [LawFit(**b) for b in fits["parametric"]["boots"]]
    table = candidates(law, budget, max_tokens, ladder, fits["count"])
    allowed = [c for c in table if not c["repeats"]]
    if not allowed:
        raise ValueError("every size would repeat data at this budget; use a larger corpus or a smaller budget")
    best = min(allowed, key=lambda c: c["loss"])
    est = interval(best["loss"], [b.loss(best["N"], best["tokens"]) for b in boots])
    N_opt, D_opt = law.optimal(budget)
    return {
        "budget": budget,
        "shape": best["shape"],
        "label": best["label"],
        "N": best["N"],
        "tokens": best["tokens"],
        "loss": best["loss"],
        "interval": [est.lo, est.hi],
        "candidates": table,
        "unconstrained": {"N": float(N_opt), "D": float(D_opt), "loss": float(law.loss(N_opt, D_opt))},
        "max_tokens": max_tokens,
    }

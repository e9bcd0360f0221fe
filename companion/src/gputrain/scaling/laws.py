"""Published scaling laws and what they prescribe (chapter 14): compute-optimal N and D, loss, GPU time.

* :data:`CHINCHILLA`: Hoffmann et al. (2022), equation 10, the constants of
  the parametric fit as the paper prints them (E 1.69, A 406.4, B 410.7,
  alpha 0.34, beta 0.28);
* :data:`BESIROGLU`: Besiroglu et al. (2024), the same fit redone on the
  paper's own points (E 1.82, A 482.01, B 2085.43, alpha 0.3478, beta 0.3658),
  which agrees with Chinchilla's first two approaches (a, b near 0.5);
* :data:`EXPONENTS`: the exponent a of N_opt ~ C^a that each study reports
  (Kaplan et al. 2020: 0.73; Chinchilla's approaches 1, 2, 3: 0.50, 0.49, 0.46).

Compute-optimal here means ``C = 6 N D`` (the papers' rule); a fitted law from
the results file of ``make record-scaling`` is read by :func:`law_from_results`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .parametric import LawFit

CHINCHILLA = LawFit(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)
BESIROGLU = LawFit(E=1.82, A=482.01, B=2085.43, alpha=0.3478, beta=0.3658)
LAWS = {"chinchilla": CHINCHILLA, "besiroglu": BESIROGLU}
EXPONENTS = {
    "Kaplan et al. 2020": 0.73,
    "Chinchilla approach 1": 0.50,
    "Chinchilla approach 2": 0.49,
    "Chinchilla approach 3": 0.46,
}
DEFAULT_MFU = 0.40  # an assumed model FLOPs utilization for GPU time (Llama 3 reports 38-43% on H100s)


def compute_optimal(law: LawFit, budget: float) -> dict[str, float]:
    """N, D, D/N and the predicted loss at the compute-optimal point of ``budget`` FLOPs (``C = 6ND``)."""
    if not (isinstance(budget, (int, float)) and math.isfinite(budget) and budget > 0):
        raise ValueError(f"the budget must be a positive, finite number of FLOPs, got {budget!r}")
    N, D = law.optimal(budget)
    return {"budget": float(budget), "N": float(N), "D": float(D), "tokens_per_param": float(D / N),
            "loss": float(law.loss(N, D))}  # fmt: skip


def gpu_seconds(budget: float, peak: float, mfu: float = DEFAULT_MFU, gpus: int = 1) -> float:
    """Wall seconds for ``budget`` FLOPs on ``gpus`` chips of ``peak`` FLOP/s at utilization ``mfu``."""
    if not (0 < mfu <= 1):
        raise ValueError(f"mfu must be in (0, 1], got {mfu}")
    if not (peak > 0 and gpus >= 1):
        raise ValueError("peak must be positive and gpus at least 1")
    return budget / (peak * mfu * gpus)


def law_from_results(path) -> LawFit:
    """The parametric law stored by ``make record-scaling`` (``data.fits.parametric.law``) in a results file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"cannot read the fit file {str(path)!r} ({exc.strerror}); pass a results JSON") from None
    except json.JSONDecodeError:
        raise ValueError(f"{str(path)!r} is not JSON; pass the results file of make record-scaling") from None
    try:
        law = data["data"]["fits"]["parametric"]["law"]
        fit = LawFit(**{k: float(law[k]) for k in ("E", "A", "B", "alpha", "beta")})
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{str(path)!r} holds no parametric fit (data.fits.parametric.law with E, A, B, alpha, beta)")
    if not all(math.isfinite(v) and v > 0 for v in (fit.E, fit.A, fit.B, fit.alpha, fit.beta)):
        raise ValueError(f"{str(path)!r} holds a parametric fit with a non-positive or non-finite constant")
    return fit

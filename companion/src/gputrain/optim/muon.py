"""Muon: momentum orthogonalised by Newton-Schulz for the weight matrices, AdamW for the rest (chapter 5)."""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch
from torch.optim import Optimizer

from .adaptive import _adam_update
from .base import Params, _check_betas, _check_lr, _check_nonneg, _check_unit, _closure_loss, _with_params

# Keller Jordan's quintic: it pushes every singular value in (0, 1] towards 1 in five steps
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def newton_schulz_flops(shape: tuple[int, int], steps: int = 5) -> int:
    """FLOPs of :func:`newton_schulz` on a matrix of ``shape``: ``steps`` x (4m^2n + 2m^3), ``m <= n`` (chapter 5)."""
    m, n = sorted(shape)
    return steps * (4 * m * m * n + 2 * m**3)


def newton_schulz(
    g: torch.Tensor,
    steps: int = 5,
    coefficients: tuple[float, float, float] = NS_COEFFICIENTS,
    eps: float = 1e-7,
    dtype: Optional[torch.dtype] = torch.bfloat16,
) -> torch.Tensor:
    r"""Orthogonalise a matrix: ``g`` = $U S V^\top$ becomes about $U V^\top$, with only matrix products (chapter 5).

    The Frobenius norm bounds the largest singular value, so dividing by it
    puts every singular value in (0, 1].  Each step then applies the odd
    polynomial $p(X) = aX + b (XX^\top)X + c (XX^\top)^2 X$, which acts on
    each singular value alone,
    $\sigma \mapsto a\sigma + b\sigma^3 + c\sigma^5$,
    and leaves the singular vectors alone.  With these
    coefficients five steps land every singular value between about 0.7 and
    1.2: not exactly 1, which does no harm in training.  The work is done on
    the wide orientation (``m <= n``), whose Gram matrix $XX^\top$ is the
    smaller one: one step costs $4m^2n + 2m^3$ FLOPs.  ``dtype``: the format of
    the products (bfloat16, as in Keller Jordan's code and ``torch.optim.Muon``;
    ``None`` keeps ``g``'s).
    """
    if g.dim() != 2:
        raise ValueError(f"newton_schulz orthogonalises a matrix; got a tensor of shape {tuple(g.shape)}")
    a, b, c = coefficients
    x = g.to(dtype or g.dtype)
    tall = g.size(0) > g.size(1)
    if tall:
        x = x.mT  # (m, n) with m <= n
    x = x / x.norm().clamp(min=eps)  # every singular value now <= 1
    for _ in range(steps):
        gram = x @ x.mT  # (m, m): X X^T
        poly = torch.addmm(gram, gram, gram, beta=b, alpha=c)  # b A + c A^2, A = X X^T
        x = torch.addmm(x, poly, x, beta=a)  # a X + (b A + c A^2) X
    return x.mT if tall else x


def uses_muon(p: torch.Tensor, group: dict) -> bool:
    """Whether :class:`Muon` orthogonalises ``p``: matrices, except lookup tables (embeddings, the tied head).

    A group may decide for all its parameters with ``"use_muon": True/False``.
    :class:`gputrain.model.GPT` marks its embedding tables with
    ``lookup_table = True``: a row of an embedding is read for one token, not
    multiplied with an input, so the argument for orthogonal updates does not
    apply to it (Jordan et al.; Moonlight keeps embeddings and head on AdamW).
    """
    if group.get("use_muon") is not None:
        return bool(group["use_muon"])
    return p.dim() == 2 and not getattr(p, "lookup_table", False)


class Muon(Optimizer):
    r"""Muon (Jordan et al. 2024): momentum, orthogonalised, for the weight matrices; AdamW for the rest.

    For each weight matrix, with momentum $\mu$ and Nesterov's look-ahead (as ``torch.optim.Muon``):

    $$B_t = \mu B_{t-1} + (1-\mu) G_t, \qquad
      O_t = \mathrm{NS}_5\bigl((1-\mu) G_t + \mu B_t\bigr), \qquad
      W_t = (1 - \eta\lambda) W_{t-1} - \eta\, s\, O_t$$

    $\mathrm{NS}_5$ is :func:`newton_schulz`: the update keeps the momentum's
    singular vectors and sets its singular values to about 1, so every
    direction of the matrix moves by the same amount, the large ones no more
    than the small ones.  $s$ depends on the shape $A \times B$:
    ``adjust_lr="original"`` (Keller Jordan's) is $\sqrt{\max(1, A/B)}$;
    ``"match_rms_adamw"`` (Moonlight, Liu et al. 2025) is
    $0.2\sqrt{\max(A, B)}$, which gives the update the size of an AdamW update,
    so Muon can share AdamW's learning rate.  Every other parameter (vectors,
    and the tables :func:`uses_muon` turns away) takes an AdamW step with
    ``betas`` and ``eps`` at the same ``lr``.  State: one buffer per matrix
    (``momentum_buffer``), against AdamW's two.  ``ns_dtype=None`` runs the
    products in bfloat16 on a GPU and in the parameters' format elsewhere
    (CPUs without native bf16 would convert every operand in software).
    Equal, step by step, to ``torch.optim.Muon`` on the matrices next to
    ``torch.optim.AdamW`` on the rest (``tests/test_optim.py``).  Chapter 5.
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_steps: int = 5,
        ns_coefficients: tuple[float, float, float] = NS_COEFFICIENTS,
        eps: float = 1e-7,
        adjust_lr: str = "original",
        ns_dtype: "torch.dtype | str | None" = torch.bfloat16,
        betas: tuple[float, float] = (0.9, 0.95),
        adamw_eps: float = 1e-8,
    ):
        _check_lr(lr)
        _check_nonneg("weight_decay", weight_decay)
        _check_unit("momentum", momentum, hint="Muon uses 0.95")
        _check_betas(betas)
        _check_nonneg("adamw_eps", adamw_eps)
        if adjust_lr not in MUON_LR_ADJUSTMENTS:
            raise ValueError(f"adjust_lr={adjust_lr!r} is not one of: {', '.join(MUON_LR_ADJUSTMENTS)}")
        if ns_dtype is not None:  # kept by name: param_groups go into JSON checkpoints
            ns_dtype = str(ns_dtype).removeprefix("torch.")
            if not isinstance(getattr(torch, ns_dtype, None), torch.dtype):
                raise ValueError(f"ns_dtype={ns_dtype!r} is not a torch dtype; use 'bfloat16', 'float32' or None")
        if not 1 <= ns_steps < 100:
            raise ValueError(f"ns_steps={ns_steps!r} must be between 1 and 99; Muon uses 5")
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps,
                        ns_coefficients=tuple(ns_coefficients), eps=eps, adjust_lr=adjust_lr, ns_dtype=ns_dtype,
                        betas=tuple(betas), adamw_eps=adamw_eps)  # fmt: skip
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            lr, wd, mu = group["lr"], group["weight_decay"], group["momentum"]
            for p, g in _with_params(group):
                state = self.state[p]
                if not uses_muon(p, group):
                    beta1, beta2 = group["betas"]
                    _adam_update(p, g, state, lr, beta1, beta2, group["adamw_eps"], wd, decoupled=True)
                    continue
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                buf = state["momentum_buffer"]
                buf.lerp_(g, 1 - mu)  # B = mu B + (1 - mu) G
                update = g.lerp(buf, mu) if group["nesterov"] else buf  # look ahead: (1 - mu) G + mu B
                dtype = (
                    getattr(torch, group["ns_dtype"]) if group["ns_dtype"] else (torch.bfloat16 if p.is_cuda else None)
                )
                ortho = newton_schulz(update, group["ns_steps"], group["ns_coefficients"], group["eps"], dtype)
                p.mul_(1 - lr * wd)  # decoupled weight decay, as in AdamW
                p.add_(ortho, alpha=-lr * MUON_LR_ADJUSTMENTS[group["adjust_lr"]](*p.shape))
        return loss


# the scale s of Muon's step for an A x B matrix
MUON_LR_ADJUSTMENTS: dict[str, Callable[[int, int], float]] = {
    "original": lambda A, B: math.sqrt(max(1, A / B)),  # Keller Jordan's
    "match_rms_adamw": lambda A, B: 0.2 * math.sqrt(max(A, B)),  # Moonlight's: an AdamW-sized step
}

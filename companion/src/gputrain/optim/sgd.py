"""Gradient descent and momentum: SGD, heavy ball and Nesterov (chapter 5)."""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch.optim import Optimizer

from .base import Params, _check_lr, _check_nonneg, _check_unit, _closure_loss, _with_params


class SGD(Optimizer):
    r"""Plain (stochastic) gradient descent: step against the gradient.

    $$g_t \leftarrow g_t + \lambda w_{t-1}, \qquad w_t = w_{t-1} - \eta\, g_t$$

    No state at all: the cheapest optimizer in memory.  Equal to
    ``torch.optim.SGD(params, lr, weight_decay=...)``.  Chapter 5.
    """

    def __init__(self, params: Params, lr: float = 1e-3, weight_decay: float = 0.0):
        _check_lr(lr)
        _check_nonneg("weight_decay", weight_decay)
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            for p, g in _with_params(group):
                if group["weight_decay"] != 0:
                    g = g.add(p, alpha=group["weight_decay"])  # L2 penalty's gradient, lambda * w
                p.add_(g, alpha=-group["lr"])
        return loss


class Momentum(Optimizer):
    r"""SGD with momentum: a heavy ball that keeps part of its velocity.

    Heavy ball (Polyak 1964), as PyTorch writes it:

    $$v_t = \mu\, v_{t-1} + (1 - \tau)\, g_t, \qquad w_t = w_{t-1} - \eta\, v_t$$

    with $v_1 = g_1$.  Nesterov's variant (Sutskever et al. 2013's form) looks
    one step ahead by using $g_t + \mu v_t$ in place of $v_t$.  Gradients that
    flip sign every step (oscillation across a narrow valley) cancel in $v$;
    gradients that agree (the gentle slope along it) add up to a step about
    $1/(1-\mu)$ times larger.  One buffer per parameter.  Equal to
    ``torch.optim.SGD(params, lr, momentum, dampening, weight_decay, nesterov)``.
    Chapter 5.
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1e-3,
        momentum: float = 0.9,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ):
        _check_lr(lr)
        _check_unit("momentum", momentum)
        _check_unit("dampening", dampening, hint="usually 0")
        _check_nonneg("weight_decay", weight_decay)
        if nesterov and (momentum == 0 or dampening != 0):
            raise ValueError("nesterov=True needs momentum > 0 and dampening = 0")
        super().__init__(
            params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov)
        )

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            mu, tau = group["momentum"], group["dampening"]
            for p, g in _with_params(group):
                if group["weight_decay"] != 0:
                    g = g.add(p, alpha=group["weight_decay"])
                state = self.state[p]
                v = state.get("momentum_buffer")
                if v is None:  # first step: the velocity starts as the gradient itself
                    v = state["momentum_buffer"] = g.clone()
                else:
                    v.mul_(mu).add_(g, alpha=1 - tau)  # v = mu v + (1 - tau) g
                direction = g.add(v, alpha=mu) if group["nesterov"] else v
                p.add_(direction, alpha=-group["lr"])
        return loss

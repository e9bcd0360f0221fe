"""A step size per parameter: RMSprop, Adam and AdamW (chapter 5)."""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch.optim import Optimizer

from .base import Params, _check_betas, _check_lr, _check_nonneg, _check_unit, _closure_loss, _with_params


class RMSprop(Optimizer):
    r"""RMSprop (Tieleman & Hinton 2012): divide each gradient by its recent size.

    $$s_t = \alpha\, s_{t-1} + (1-\alpha)\, g_t^2, \qquad
      w_t = w_{t-1} - \eta\, \frac{g_t}{\sqrt{s_t} + \epsilon}$$

    Steep coordinates (large $|g|$) get small steps, flat ones large steps: a
    step size per parameter.  With ``centered=True`` the running mean $\bar g$
    is subtracted, $\sqrt{s_t - \bar g_t^2}$; with ``momentum`` > 0 the scaled
    gradient feeds a velocity buffer.  One or two buffers per parameter.
    Equal to ``torch.optim.RMSprop`` with the same arguments.  Chapter 5.
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
    ):
        _check_lr(lr)
        _check_unit("alpha", alpha)
        _check_nonneg("eps", eps)
        _check_nonneg("weight_decay", weight_decay)
        _check_unit("momentum", momentum)
        super().__init__(
            params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum, centered=centered)
        )

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            alpha, eps, mu = group["alpha"], group["eps"], group["momentum"]
            for p, g in _with_params(group):
                if group["weight_decay"] != 0:
                    g = g.add(p, alpha=group["weight_decay"])
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["square_avg"] = torch.zeros_like(p)
                    if mu > 0:
                        state["momentum_buffer"] = torch.zeros_like(p)
                    if group["centered"]:
                        state["grad_avg"] = torch.zeros_like(p)
                state["step"] += 1
                s = state["square_avg"]
                s.mul_(alpha).addcmul_(g, g, value=1 - alpha)  # s = alpha s + (1 - alpha) g^2
                if group["centered"]:
                    gbar = state["grad_avg"]
                    gbar.lerp_(g, 1 - alpha)  # running mean of g
                    rms = s.addcmul(gbar, gbar, value=-1).sqrt_()  # sqrt(s - gbar^2): a std, not an RMS
                else:
                    rms = s.sqrt()
                rms.add_(eps)
                if mu > 0:
                    buf = state["momentum_buffer"]
                    buf.mul_(mu).addcdiv_(g, rms)
                    p.add_(buf, alpha=-group["lr"])
                else:
                    p.addcdiv_(g, rms, value=-group["lr"])  # w -= lr * g / (sqrt(s) + eps)
        return loss


class Adam(Optimizer):
    r"""Adam (Kingma & Ba 2015): momentum and RMSprop together, with bias correction.

    $$m_t = \beta_1 m_{t-1} + (1-\beta_1)\, g_t, \qquad
      v_t = \beta_2 v_{t-1} + (1-\beta_2)\, g_t^2$$
    $$\hat m_t = \frac{m_t}{1-\beta_1^t}, \qquad \hat v_t = \frac{v_t}{1-\beta_2^t}, \qquad
      w_t = w_{t-1} - \eta\, \frac{\hat m_t}{\sqrt{\hat v_t} + \epsilon}$$

    $m$ and $v$ start at zero, so early averages are too small; dividing by
    $1-\beta^t$ undoes that.  At $t=1$ the step is $\eta\, g/(|g|+\epsilon)$:
    every parameter moves by about $\eta$, whatever its gradient's size.
    ``weight_decay`` here is an L2 penalty added to $g_t$ (the coupled form);
    :class:`AdamW` decouples it.  Two buffers per parameter, each the size of
    the parameter: the optimizer state is twice the model.  Equal to
    ``torch.optim.Adam`` (``amsgrad=False``).  Chapter 5.
    """

    decoupled = False  # AdamW flips this: how weight decay enters is the only difference

    def __init__(
        self,
        params: Params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ):
        _check_lr(lr)
        _check_betas(betas)
        _check_nonneg("eps", eps)
        _check_nonneg("weight_decay", weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p, g in _with_params(group):
                _adam_update(p, g, self.state[p], lr, beta1, beta2, eps, wd, self.decoupled)
        return loss


def _adam_update(p, g, state: dict, lr: float, beta1: float, beta2: float, eps: float, wd: float, decoupled: bool):
    """One Adam (or, ``decoupled``, AdamW) step of parameter ``p`` with gradient ``g``; shared with :class:`Muon`."""
    if not state:
        state["step"] = 0
        state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
    state["step"] = t = int(state["step"]) + 1  # int() also accepts torch's tensor counter
    if wd != 0:
        if decoupled:
            p.mul_(1 - lr * wd)  # AdamW: shrink w directly, outside the adaptive scaling
        else:
            g = g.add(p, alpha=wd)  # Adam: L2's gradient joins g and gets rescaled with it
    m, v = state["exp_avg"], state["exp_avg_sq"]
    m.lerp_(g, 1 - beta1)  # m = beta1 m + (1 - beta1) g
    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)  # v = beta2 v + (1 - beta2) g^2
    bias1 = 1 - beta1**t
    bias2 = 1 - beta2**t
    denom = (v.sqrt() / bias2**0.5).add_(eps)  # sqrt(v_hat) + eps
    p.addcdiv_(m, denom, value=-lr / bias1)  # w -= lr * m_hat / (sqrt(v_hat) + eps)


class AdamW(Adam):
    r"""AdamW (Loshchilov & Hutter 2019): Adam with decoupled weight decay.

    $$w_{t-1} \leftarrow (1 - \eta\lambda)\, w_{t-1}, \qquad\text{then the Adam step on } g_t \text{ alone.}$$

    In :class:`Adam` the decay term $\lambda w$ is divided by $\sqrt{\hat v}$ like
    the rest of the gradient, so parameters with large gradients are barely
    decayed and the amount stops depending on $\lambda$ the way one expects.
    AdamW shrinks every weight by the same factor per step.  Equal to
    ``torch.optim.AdamW``.  Chapter 5.
    """

    decoupled = True

    def __init__(
        self,
        params: Params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)

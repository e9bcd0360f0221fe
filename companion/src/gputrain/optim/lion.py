"""Lion: the sign of a momentum blend (chapter 5)."""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch.optim import Optimizer

from .base import Params, _check_betas, _check_lr, _check_nonneg, _closure_loss, _with_params


class Lion(Optimizer):
    r"""Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"): the sign of a momentum blend.

    $$c_t = \beta_1 m_{t-1} + (1-\beta_1)\, g_t, \qquad
      w_t = w_{t-1} - \eta\,\bigl(\operatorname{sign}(c_t) + \lambda\, w_{t-1}\bigr), \qquad
      m_t = \beta_2 m_{t-1} + (1-\beta_2)\, g_t$$

    Every coordinate moves by exactly $\eta$ (plus decay), so Lion wants a
    learning rate 3-10x smaller than AdamW's and a larger weight decay.  One
    buffer per parameter (``exp_avg``): half of Adam's state.  PyTorch has no
    Lion; ``tests/test_optim.py`` checks it against the paper's update rule
    written out separately.  Chapter 5.
    """

    def __init__(
        self, params: Params, lr: float = 1e-4, betas: tuple[float, float] = (0.9, 0.99), weight_decay: float = 0.0
    ):
        _check_lr(lr)
        _check_betas(betas)
        _check_nonneg("weight_decay", weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            lr, (beta1, beta2), wd = group["lr"], group["betas"], group["weight_decay"]
            for p, g in _with_params(group):
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                m = state["exp_avg"]
                update = m.lerp(g, 1 - beta1).sign_()  # sign(beta1 m + (1 - beta1) g)
                if wd != 0:
                    p.mul_(1 - lr * wd)  # decoupled decay, as in AdamW
                p.add_(update, alpha=-lr)
                m.lerp_(g, 1 - beta2)  # m = beta2 m + (1 - beta2) g: a slower average than the step's
        return loss

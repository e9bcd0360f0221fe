"""FP32 master weights for a model that computes in 16 bits (chapter 7, Micikevicius et al.)."""

from __future__ import annotations

from typing import Iterable

import torch


class MasterWeights:
    """FP32 master copies of a low-precision model's parameters (chapter 7, Micikevicius et al.).

    The model computes in ``bf16``/``fp16``; the optimizer owns FP32 copies.
    :meth:`step` copies the low-precision gradients into the masters, steps
    the optimizer there (where a 1e-3 change to 1.0 survives), and writes the
    rounded result back to the model.  ``make_optimizer`` receives the master
    parameters, e.g. ``lambda ps: torch.optim.SGD(ps, lr=0.1)``.
    """

    def __init__(self, params: Iterable[torch.nn.Parameter], make_optimizer):
        self.model_params = [p for p in params if p.requires_grad]
        self.master_params = [torch.nn.Parameter(p.detach().float().clone()) for p in self.model_params]
        self.optimizer = make_optimizer(self.master_params)

    @torch.no_grad()
    def step(self) -> None:
        for p, m in zip(self.model_params, self.master_params):
            m.grad = None if p.grad is None else p.grad.float()  # (same shape), now in FP32
        self.optimizer.step()
        for p, m in zip(self.model_params, self.master_params):
            p.copy_(m)  # round the FP32 result to the model's format

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the model's gradients (the masters' are rebuilt at every step)."""
        for p in self.model_params:
            p.grad = None

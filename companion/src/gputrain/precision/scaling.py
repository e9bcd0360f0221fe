"""Dynamic loss scaling from scratch, the behaviour of ``torch.amp.GradScaler`` (chapter 7)."""

from __future__ import annotations

from typing import Optional

import torch


def _fp32(value: float) -> float:
    """``value`` rounded to the nearest FP32 number (inf beyond FP32's range)."""
    return float(torch.tensor(value, dtype=torch.float64).float())


class DynamicLossScaler:
    """Dynamic loss scaling written from scratch: the behaviour of ``torch.amp.GradScaler`` (chapter 7).

    FP16 gradients below about 6e-8 flush to zero.  Multiplying the loss by a
    large ``scale`` shifts every gradient up into range; the optimizer step
    divides it out again.  If any gradient overflowed (inf/NaN), the step is
    skipped and the scale backs off; after ``growth_interval`` clean steps in
    a row it grows.  Use it like GradScaler::

        scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
    ):
        if not init_scale > 0 or not growth_factor > 1 or not 0 < backoff_factor < 1 or growth_interval < 1:
            raise ValueError("need init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1, growth_interval >= 1")
        if _fp32(init_scale) == float("inf"):
            raise ValueError(
                f"init_scale={init_scale:g} is inf in FP32 (max {torch.finfo(torch.float32).max:.4g}); "
                "pass a smaller init_scale, e.g. 2.0**16"
            )
        self.scale_value = _fp32(init_scale)
        self.growth_factor = growth_factor
        self.backoff_factor = backoff_factor
        self.growth_interval = growth_interval
        self.good_steps = 0  # clean steps since the last change of scale
        self.skipped_steps = 0  # steps skipped because a gradient was inf/NaN, in total
        self._found_inf: Optional[bool] = None  # this iteration's verdict, None until unscale_

    def get_scale(self) -> float:
        return self.scale_value

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss * scale``: backward through it produces scaled gradients."""
        return loss * self.scale_value

    def unscale_(self, optimizer: torch.optim.Optimizer) -> bool:
        """Divide the gradients by the scale in place; return whether any was inf/NaN."""
        if self._found_inf is not None:
            raise RuntimeError("unscale_() was already called since the last update()")
        inv_scale = torch.tensor(1.0 / self.scale_value, dtype=torch.float32)  # exact: scale is a power of 2
        found = False
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                found |= not bool(torch.isfinite(p.grad).all())
                p.grad.mul_(inv_scale.to(p.grad.dtype))
        self._found_inf = found
        return found

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Unscale if needed, then step unless a gradient overflowed.  Returns whether it stepped."""
        if self._found_inf is None:
            self.unscale_(optimizer)
        if self._found_inf:
            self.skipped_steps += 1
            return False
        optimizer.step()
        return True

    def update(self) -> None:
        """Back off after an overflow; grow after ``growth_interval`` clean steps in a row."""
        if self._found_inf is None:
            raise RuntimeError("update() needs a step() (or unscale_()) in this iteration first")
        # GradScaler keeps its scale as an FP32 tensor: ours is rounded to FP32 after every change,
        # and a grown scale is judged after that rounding (2^128 is finite in FP64 but inf in FP32)
        if self._found_inf:
            self.scale_value = _fp32(self.scale_value * self.backoff_factor)
            self.good_steps = 0
        else:
            self.good_steps += 1
            if self.good_steps == self.growth_interval:
                grown = _fp32(self.scale_value * self.growth_factor)
                if grown != float("inf"):  # GradScaler refuses to grow into inf
                    self.scale_value = grown
                self.good_steps = 0
        self._found_inf = None

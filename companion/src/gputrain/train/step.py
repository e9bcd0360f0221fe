"""One training step and what guards it (chapter 6): ``train_step``, ``evaluate``, the step guard.

The step is a short named function that receives its objects; around it sit
the spike detector and the guard that never lets a non-finite loss or
gradient reach the weights.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

import torch

if TYPE_CHECKING:  # annotations only: the Accelerator is passed in
    from accelerate import Accelerator

Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass
class StepStats:
    loss: float  # mean loss of the step over all micro-batches and processes
    grad_norm: float  # global gradient norm before clipping
    applied: bool  # whether the update reached the weights


def train_step(
    model,
    batches: list[Batch],
    optimizer,
    accelerator: Accelerator,
    grad_clip: float,
    accept: Optional[Callable[[float, float], bool]] = None,
) -> StepStats:
    """One optimizer step over ``batches``: forward, loss, backward, clip, update.

    Chapter 6, "The step, and the loop around it".  Several batches make one
    step when gradients are accumulated over them.

    ``accept(loss, grad_norm)`` decides whether the update is applied; by
    default only finite values are.  Every process computes the same decision
    because loss and norm are reduced across processes first.
    """
    total = torch.zeros((), device=accelerator.device)
    for x, y in batches:
        # DDP syncs the gradients only on the last micro-batch
        with accelerator.accumulate(model):
            # x (B, T), y (B, T) -> a scalar loss. The (B, T, V) logits are
            # freed here, not held through backward, which needs only what
            # cross_entropy saved (B*T*V*4 bytes: 4 MiB at B=32, T=128, V=256)
            loss = model(x, y)[1]
            accelerator.backward(loss)  # scaled by 1/grad_accum_steps inside
            total += loss.detach()
    mean = accelerator.reduce(total / len(batches), reduction="mean")
    # the norm before clipping; an infinite max_norm only measures it
    max_norm = grad_clip if grad_clip > 0 else math.inf
    norm = clip_gradients(accelerator, model.parameters(), max_norm)
    both = torch.stack([mean.float(), norm.float().to(mean.device)])
    loss_value, norm_value = both.tolist()  # one sync with the device
    finite = math.isfinite(loss_value) and math.isfinite(norm_value)
    applied = accept(loss_value, norm_value) if accept else finite
    if applied:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return StepStats(loss_value, norm_value, applied)


def clip_gradients(accelerator: Accelerator, parameters, max_norm: float) -> torch.Tensor:
    """``accelerator.clip_grad_norm_``: the global gradient norm before clipping, gradients scaled to ``max_norm``.

    In one process nothing is sharded, so it is torch's ``clip_grad_norm_``
    after unscaling fp16 gradients, which is what Accelerate runs there too,
    minus its search for sharded (DTensor) gradients: that search imports
    ``torch.distributed.tensor`` and sympy, 0.3-0.8 s and 40 MiB of a CPU
    run's start.  Sharded and distributed runs go through Accelerate.
    """
    if accelerator.distributed_type != "NO":  # DistributedType is a str enum
        return accelerator.clip_grad_norm_(parameters, max_norm)
    accelerator.unscale_gradients()
    return torch.nn.utils.clip_grad_norm_(parameters, max_norm)


@torch.no_grad()
def evaluate(model, loader, accelerator: Optional[Accelerator] = None, max_batches: int = 8) -> float:
    """Mean loss per sample over up to ``max_batches`` batches (dropout off), across processes (chapter 6).

    Without an ``accelerator`` each batch is moved to the model's device.
    """
    was_training = model.training
    model.eval()
    dev = None if accelerator else next(model.parameters()).device
    losses = []
    for i, (x, y) in enumerate(loader):
        if i >= max_batches:
            break
        if dev is not None:
            x, y = x.to(dev), y.to(dev)
        _, loss = model(x, y)
        per_sample = loss.float().reshape(1).expand(len(x)).contiguous()  # (B,): the batch mean, per sample
        # gather_for_metrics drops the samples Accelerate padded onto an uneven last batch
        losses.append(accelerator.gather_for_metrics(per_sample) if accelerator else per_sample)
    model.train(was_training)
    if not losses:
        raise ValueError("evaluate() saw no batch; give it a loader with at least one batch")
    return torch.cat(losses).mean().item()


class SpikeDetector:
    """Flags a training loss far above its recent past: a robust z-score over a window (chapter 6).

    Against the last ``window`` finite losses, a new loss ``x`` scores

    $$z = \\frac{x - \\operatorname{median}}{1.4826\\,\\operatorname{MAD}}$$

    where MAD is the median absolute deviation from the median (1.4826 MAD
    estimates the standard deviation of normal noise).  Median and MAD barely
    move when one batch is wild, unlike a mean and standard deviation, so one
    spike cannot hide itself by inflating the yardstick.  A loss is a spike
    when ``z > threshold`` once ``min_history`` losses have been seen.  The
    scale is floored at ``1e-3 * |median|`` so a perfectly flat history does
    not turn every wobble into a spike.  Non-finite losses are not scored and
    not remembered (the training loop skips those steps on its own).
    """

    def __init__(self, window: int = 50, threshold: float = 6.0, min_history: int = 10):
        if window < 2:
            raise ValueError(f"window must be >= 2 losses, got {window}")
        if not threshold > 0:
            raise ValueError(f"threshold must be a positive z-score, got {threshold}")
        self.window, self.threshold = window, threshold
        self.min_history = max(2, min(min_history, window))
        self.history: list[float] = []

    def score(self, loss: float) -> float:
        """The robust z-score of ``loss`` against the window (0.0 until there is enough history)."""
        if len(self.history) < self.min_history or not math.isfinite(loss):
            return 0.0
        median = statistics.median(self.history)
        mad = statistics.median(abs(v - median) for v in self.history)
        scale = max(1.4826 * mad, 1e-3 * abs(median), 1e-12)
        return (loss - median) / scale

    def update(self, loss: float) -> bool:
        """Score ``loss``, remember it, and say whether it is a spike."""
        if not math.isfinite(loss):
            return False
        spike = self.score(loss) > self.threshold
        self.history.append(float(loss))
        del self.history[: -self.window]
        return spike

    def state_dict(self) -> dict:
        return {
            "window": self.window,
            "threshold": self.threshold,
            "min_history": self.min_history,
            "history": list(self.history),
        }

    def load_state_dict(self, state: dict) -> None:
        self.history = [float(v) for v in state["history"]][-self.window :]


class StepGuard:
    """Decides whether a step's update may reach the weights, and remembers why not (chapter 6).

    Non-finite loss or gradient norm: skipped and counted.  A loss spike
    (:class:`SpikeDetector`): logged, and skipped too when ``skip_spikes``.
    Under fp16 a finite loss with an infinite gradient is the loss scaler's
    overflow, which its own step skips: not counted as bad data.
    """

    def __init__(
        self, spike_window: int = 50, spike_threshold: float = 6.0, skip_spikes: bool = False, fp16_scaler: bool = False
    ):
        self.skip_spikes, self.fp16_scaler = skip_spikes, fp16_scaler
        self.detector = SpikeDetector(spike_window, spike_threshold) if spike_window else None
        self.bad_in_row = 0
        self.event = ""

    def __call__(self, loss: float, grad_norm: float) -> bool:
        finite_loss = math.isfinite(loss)
        if finite_loss and not math.isfinite(grad_norm) and self.fp16_scaler:
            self.event, self.bad_in_row = "overflow", 0
            return True  # GradScaler's step sees the inf, skips, and lowers the scale
        if not (finite_loss and math.isfinite(grad_norm)):
            self.event, self.bad_in_row = "nonfinite", self.bad_in_row + 1
            return False
        self.bad_in_row = 0
        spike = self.detector.update(loss) if self.detector else False
        self.event = ("spike-skipped" if self.skip_spikes else "spike") if spike else ""
        return not (spike and self.skip_spikes)


class TrainingDiverged(RuntimeError):
    """Too many non-finite steps in a row: the run stopped, the last good checkpoint is intact."""

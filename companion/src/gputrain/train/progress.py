"""A run's position and its result (chapter 6): :class:`Progress`, :class:`TrainResult` and the lines that sum it up.

:class:`Progress` is what a checkpoint carries besides the tensors; a resumed
run continues from it.  :class:`TrainResult` is what :func:`~gputrain.train.train`
returns, and :func:`summary_line` and :func:`interrupt_line` are the one line
printed about it at the end.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Optional

import torch.nn as nn

from .checkpoint import CheckpointError
from .config import TrainConfig


@dataclass
class Progress:
    """Everything about a run's position that a checkpoint carries besides the tensors (chapter 6)."""

    step: int = 0  # optimizer steps done
    epoch: int = 0  # current pass over the training windows
    batch: int = 0  # batches done in that epoch
    losses: list[float] = field(default_factory=list)  # training loss per step (NaN where not finite)
    lrs: list[float] = field(default_factory=list)  # learning rate per step
    grad_norms: list[float] = field(default_factory=list)  # gradient norm before clipping per step
    val_losses: list[tuple[int, float]] = field(default_factory=list)  # (step, validation loss)
    events: dict[str, str] = field(default_factory=dict)  # step (as text: JSON keys) -> guard event
    best_val: float = math.inf  # early stopping's best validation loss
    best_step: int = 0  # ... and its step
    evals_since_best: int = 0  # validation passes without improvement
    bad_in_row: int = 0  # non-finite steps in a row (the guard's counter)
    detector: Optional[dict] = None  # the spike detector's state

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Progress":
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise CheckpointError(
                f"the checkpoint's progress has fields this gputrain does not know "
                f"({', '.join(sorted(unknown))}); resume with the gputrain that wrote it"
            )
        progress = cls(**data)
        progress.val_losses = [(int(s), float(v)) for s, v in progress.val_losses]
        return progress


@dataclass
class TrainResult:
    losses: list[float]  # training loss at every step (NaN where it was not finite)
    val_losses: list[tuple[int, float]]  # (step, validation loss) at each evaluation
    lrs: list[float]  # learning rate at every step
    grad_norms: list[float]  # gradient norm before clipping at every step
    tokens_per_s: float  # training throughput of this run's loop (targets per second, all processes)
    seconds: float  # wall time of this run's loop
    model: nn.Module = field(repr=False)  # the trained model (unwrapped; best weights with patience > 0)
    config: TrainConfig = field(repr=False)
    steps: int = 0  # optimizer steps taken in total (including a resumed run's earlier ones)
    epochs: float = 0.0  # passes over the training windows
    skipped: list[int] = field(default_factory=list)  # steps whose update was dropped (non-finite or spike)
    spikes: list[int] = field(default_factory=list)  # steps whose loss the detector flagged
    stopped_early: bool = False  # early stopping ended the run
    best_step: int = 0  # step of the best validation loss (0 if never evaluated)
    best_val_loss: float = math.inf
    checkpoint: Optional[Path] = None  # last checkpoint written (or resumed from, if no step was taken)
    is_main_process: bool = True
    resumed_step: int = 0  # the step of the checkpoint this run resumed from (0: a fresh run)
    interrupted: Optional[str] = None  # 'SIGINT' or 'SIGTERM' when a signal ended the run early
    nothing_to_do: Optional[str] = None  # why a resumed run took no step (it had finished), else None

    log_path: Optional[Path] = None  # metrics.csv written (None without a log_dir)

    def summary(self) -> dict:
        return {
            "first_loss": self.losses[0],
            "final_loss": self.losses[-1],
            "val_losses": self.val_losses,
            "tokens_per_s": self.tokens_per_s,
            "seconds": self.seconds,
            "steps": self.steps,
            "skipped": len(self.skipped),
            "spikes": len(self.spikes),
            "stopped_early": self.stopped_early,
            "best_val_loss": self.best_val_loss,
            "config": asdict(self.config),
        }


def summary_line(result: TrainResult) -> str:
    """One line about a finished run: losses, speed, and where its log and checkpoint went."""
    val = f", validation {result.val_losses[-1][1]:.3f}" if result.val_losses else ""
    where = "".join(
        [
            f"; log {result.log_path} (draw it: gputrain plot {result.log_path.parent})" if result.log_path else "",
            f"; checkpoint {result.checkpoint}" if result.checkpoint else "",
        ]
    )
    return (
        f"trained {result.steps} steps ({result.epochs:.2f} epochs) in {result.seconds:.1f} s: "
        f"loss {result.losses[0]:.3f} -> {result.losses[-1]:.3f}{val}, {result.tokens_per_s:,.0f} tokens/s{where}"
    )


def interrupt_line(result: TrainResult) -> str:
    """One line about a run a signal ended: the step it finished and the checkpoint that holds it."""
    saved = (
        f"saved checkpoint {str(result.checkpoint)!r}; continue with --resume-from {result.checkpoint.parent}"
        if result.config.checkpoint_dir and result.checkpoint
        else "nothing saved (no checkpoint_dir)"
    )
    return f"{result.interrupted}: stopped after step {result.steps}; {saved}"

"""What a run leaves behind (chapter 6): metrics.csv, reading it back, and plotting it.

``gputrain.train`` re-exports everything here.  matplotlib is imported by
:func:`plot_history` only: a training run never loads it (a third of a second
and tens of MiB of memory that a run does not use).
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

from .config import TrainConfig

if TYPE_CHECKING:  # only for annotations: the Accelerator is passed in by train()
    from accelerate import Accelerator


LOG_COLUMNS = ("step", "epoch", "loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "event")


class RunLog:
    """metrics.csv (and TensorBoard through Accelerate's trackers) on the main process only.

    A fresh run starts the file.  A resumed run (``resumed=True``) keeps the
    rows already in it up to the checkpoint's step, byte for byte, fills in
    from ``rows`` (the history the checkpoint restored) any step the file
    lacks, and drops rows past the checkpoint: those steps are about to be
    trained again.  The file is rewritten atomically before the run appends to it.
    """

    def __init__(self, cfg: TrainConfig, accelerator: Accelerator, rows: list[dict], resumed: bool = False,
                 write: bool = True):  # fmt: skip
        self.accelerator, self.file, self.writer, self.path = accelerator, None, None, None
        self.tensorboard = cfg.tensorboard and write
        if not (cfg.log_dir and accelerator.is_main_process and write):
            return
        Path(cfg.log_dir).mkdir(parents=True, exist_ok=True)
        self.path = Path(cfg.log_dir) / "metrics.csv"
        if resumed and self.path.exists():
            rows = _logged_rows(self.path, rows)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=LOG_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        os.replace(tmp, self.path)
        # line-buffered: every finished step is on disk even if the process is killed a moment later
        self.file = open(self.path, "a", newline="", buffering=1)
        self.writer = csv.DictWriter(self.file, fieldnames=LOG_COLUMNS)

    def row(self, **values) -> None:
        if self.writer:
            self.writer.writerow(values)
        if self.tensorboard:
            self.accelerator.log(
                {k: v for k, v in values.items() if isinstance(v, float) and k != "epoch"}, step=values["step"]
            )

    def close(self) -> None:
        if self.file:
            self.file.close()
            self.file = None


def _logged_rows(path: Path, restored: list[dict]) -> list[dict]:
    """The rows of ``path`` for the steps in ``restored`` (as written), and ``restored``'s where the file has none."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != LOG_COLUMNS:
            return restored  # another layout (an older gputrain): the checkpoint's history is the record
        logged = {}
        for row in reader:
            try:
                if None not in row and None not in row.values():  # a line with too many or too few cells
                    logged[int(row["step"])] = row
            except (TypeError, ValueError):
                continue  # a damaged line: the checkpoint's row replaces it
    return [logged.get(int(r["step"]), r) for r in restored]


def event_steps(events) -> tuple[list[int], list[int]]:
    """``(skipped, spikes)``: the steps whose update was dropped, and those the spike detector flagged.

    ``events`` is ``(step, event)`` pairs, events as :class:`~gputrain.train.StepGuard` names them.
    """
    events = [(int(s), e) for s, e in events if e]
    skipped = sorted(s for s, e in events if e in ("nonfinite", "spike-skipped"))
    spikes = sorted(s for s, e in events if e.startswith("spike"))
    return skipped, spikes


def read_history(path) -> dict[str, list]:
    """A metrics.csv read back into columns (empty cells become NaN)."""
    cols: dict[str, list] = {c: [] for c in LOG_COLUMNS}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            for c in LOG_COLUMNS:
                v = row[c]
                cols[c].append(v if c == "event" else (float(v) if v not in ("", None) else math.nan))
    return cols


def plot_history(history, axes=None, smooth: int = 10):
    """Loss (train and validation, spikes and skipped steps marked), learning rate and gradient norm (chapter 6).

    ``history`` is a :class:`~gputrain.train.TrainResult` (or anything with its
    ``losses``, ``lrs``, ``grad_norms``, ``val_losses``, ``spikes`` and
    ``skipped``) or the path of a run's metrics.csv.
    Returns the matplotlib figure.
    """
    import matplotlib.pyplot as plt  # here, not at the top: training never plots

    from ..plots import loss_curves

    if hasattr(history, "losses"):  # a TrainResult
        losses, lrs, norms = history.losses, history.lrs, history.grad_norms
        val, spikes, skipped = history.val_losses, history.spikes, history.skipped
    else:
        h = read_history(history)
        losses, lrs, norms = h["loss"], h["lr"], h["grad_norm"]
        val = [(int(s), v) for s, v in zip(h["step"], h["val_loss"]) if math.isfinite(v)]
        skipped, spikes = event_steps(zip(h["step"], h["event"]))
    if axes is None:
        fig, axes = plt.subplots(1, 3, figsize=(13, 3.4), constrained_layout=True)
    fig = axes[0].figure
    loss_curves(axes[0], losses, val, smooth=smooth)
    finite = [v for v in losses if math.isfinite(v)]
    for steps, marker, color, label in ((spikes, "x", "red", "spike"), (skipped, "v", "black", "skipped")):
        if steps:
            top = max(finite) if finite else 0.0
            ys = [losses[s - 1] if math.isfinite(losses[s - 1]) else top for s in steps]
            axes[0].scatter(steps, ys, marker=marker, color=color, zorder=3, label=label)
            axes[0].legend()
    axes[1].plot(range(1, len(lrs) + 1), lrs, color="C2")
    axes[1].set(xlabel="step", ylabel="learning rate")
    axes[2].plot(range(1, len(norms) + 1), norms, color="C3", lw=0.8)
    axes[2].set(xlabel="step", ylabel="gradient norm (before clipping)", yscale="log")
    return fig

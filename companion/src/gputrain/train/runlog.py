"""What a run leaves behind (chapter 6): metrics.csv, reading it back, and plotting it.

``gputrain.train`` re-exports everything here.  matplotlib is imported by
:func:`plot_history` only: a training run never loads it (a third of a second
and tens of MiB of memory that a run does not use).
"""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

from .checkpoint import SaveError, write_atomic
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

    A write that fails (a full disk) raises :class:`~gputrain.train.SaveError`,
    one line, and leaves the file ending in a whole row: no temporary file, no
    row cut in half.
    """

    def __init__(self, cfg: TrainConfig, accelerator: Accelerator, rows: list[dict], resumed: bool = False,
                 write: bool = True):  # fmt: skip
        self.accelerator, self.fd, self.path = accelerator, None, None
        self.tensorboard = cfg.tensorboard and write
        self.resume_hint = f"resume with --resume-from {cfg.checkpoint_dir}" if cfg.checkpoint_dir else "run again"
        if not (cfg.log_dir and accelerator.is_main_process and write):
            return
        self.path = Path(cfg.log_dir) / "metrics.csv"
        if resumed and self.path.exists():
            rows = _logged_rows(self.path, rows)
        try:
            Path(cfg.log_dir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SaveError(f"could not create log_dir {cfg.log_dir!r} ({exc.strerror or exc})") from None
        text = _csv_text(rows, header=True)
        write_atomic(self.path, text)  # SaveError, temporary file removed, on a full disk
        # unbuffered appends: every finished step is on disk even if the process is killed a moment later
        self.fd, self.size = os.open(self.path, os.O_WRONLY | os.O_APPEND), len(text)

    def row(self, **values) -> None:
        if self.fd is not None:
            self._append(_csv_text([values]))
        if self.tensorboard:
            self.accelerator.log(
                {k: v for k, v in values.items() if isinstance(v, float) and k != "epoch"}, step=values["step"]
            )

    def _append(self, data: bytes) -> None:
        """One row, whole or not at all: a failed write is cut back to the row before it."""
        try:
            _write_all(self.fd, data)
            self.size += len(data)
        except OSError as exc:
            try:
                os.ftruncate(self.fd, self.size)  # needs no free space: the part of the row that was written goes
            except OSError:
                pass
            self.close()
            raise SaveError(
                f"could not append to {str(self.path)!r} ({exc.strerror or exc}); it ends with the last whole row; "
                f"free space, then {self.resume_hint}"
            ) from None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written (a write may take only part of them)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _csv_text(rows: list[dict], header: bool = False) -> bytes:
    """``rows`` as the lines of metrics.csv (and its header line first)."""
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=LOG_COLUMNS)
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return out.getvalue().encode()


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

    ``events`` is ``(step, event)`` pairs, events as :class:`~gputrain.train.StepGuard` names them
    (an event cell may hold several words: ``spike resumed``).
    """
    events = list(events)  # read twice below
    return marked_steps(events, "nonfinite", "spike-skipped"), marked_steps(events, "spike", "spike-skipped")


def marked_steps(events, *names: str) -> list[int]:
    """The steps of ``(step, event)`` pairs whose event holds one of ``names`` (e.g. ``'resumed'``)."""
    return sorted(int(s) for s, e in events if e and not set(e.split()).isdisjoint(names))


def read_history(path) -> dict[str, list]:
    """A metrics.csv read back into columns (empty cells become NaN).

    A file that is not a gputrain metrics.csv (another layout, a cell that is no number) raises one ``ValueError``.
    """
    cols: dict[str, list] = {c: [] for c in LOG_COLUMNS}
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if not set(LOG_COLUMNS) <= set(reader.fieldnames or ()):
            raise ValueError(
                f"{str(path)!r} is not a gputrain metrics.csv: it lacks the columns {', '.join(LOG_COLUMNS)}"
            )
        for line, row in enumerate(reader, 2):
            for c in LOG_COLUMNS:
                v = row[c]
                try:
                    cols[c].append(v if c == "event" else (float(v) if v not in ("", None) else math.nan))
                except ValueError:
                    raise ValueError(f"{str(path)!r} line {line}: {c} {v!r} is not a number") from None
    return cols


# How plot_history marks what happened to a run, on every panel, as a vertical line: (event word, line style,
# colour, width, opacity).  An interrupt is usually resumed at the same place: a wide grey band under a dashed line.
RUN_MARKS = (("interrupted", "-", "C7", 4, 0.35), ("resumed", "--", "C4", 1, 1.0))


def plot_history(history, axes=None, smooth: int = 10):
    """Loss (train and validation, spikes and skipped steps marked), learning rate and gradient norm (chapter 6).

    ``history`` is a :class:`~gputrain.train.TrainResult` (or anything with its
    ``losses``, ``lrs``, ``grad_norms``, ``val_losses``, ``spikes`` and
    ``skipped``), the path of a run's metrics.csv or the columns
    :func:`read_history` read from one.  Every panel marks the
    steps where the run was resumed and where a signal interrupted it (a
    vertical line each); the loss panel marks spikes and skipped updates.
    Each mark's artist has the event as its ``gid``.  Returns the matplotlib figure.
    """
    from ..plots import loss_curves

    if hasattr(history, "losses"):  # a TrainResult
        losses, lrs, norms = history.losses, history.lrs, history.grad_norms
        val, spikes, skipped = history.val_losses, history.spikes, history.skipped
        resumed = getattr(history, "resumed_step", 0)
        marks = {
            "resumed": [resumed + 1] if resumed and len(losses) > resumed else [],
            "interrupted": [len(losses)] if getattr(history, "interrupted", None) else [],
        }
    else:
        h = history if isinstance(history, dict) else read_history(history)
        losses, lrs, norms = h["loss"], h["lr"], h["grad_norm"]
        val = [(int(s), v) for s, v in zip(h["step"], h["val_loss"]) if math.isfinite(v)]
        events = list(zip(h["step"], h["event"]))
        skipped, spikes = event_steps(events)
        marks = {name: marked_steps(events, name) for name, *_ in RUN_MARKS}
    if axes is None:
        import matplotlib.pyplot as plt  # here, not at the top: training never plots

        fig, axes = plt.subplots(1, 3, figsize=(13, 3.4), constrained_layout=True)
    fig = axes[0].figure
    loss_curves(axes[0], losses, val, smooth=smooth)
    finite = [v for v in losses if math.isfinite(v)]
    for steps, marker, color, label in ((spikes, "x", "red", "spike"), (skipped, "v", "black", "skipped")):
        if steps:
            top = max(finite) if finite else 0.0
            ys = [losses[s - 1] if math.isfinite(losses[s - 1]) else top for s in steps]
            axes[0].scatter(steps, ys, marker=marker, color=color, zorder=3, label=label, gid=label)
            axes[0].legend()
    axes[1].plot(range(1, len(lrs) + 1), lrs, color="C2")
    axes[1].set(xlabel="step", ylabel="learning rate")
    axes[2].plot(range(1, len(norms) + 1), norms, color="C3", lw=0.8)
    axes[2].set(xlabel="step", ylabel="gradient norm (before clipping)", yscale="log")
    for name, style, color, width, alpha in RUN_MARKS:
        for ax in axes:
            for i, step in enumerate(marks[name]):
                # a resume continues after the checkpoint of the step before; an interrupt stops after its step
                at = step - 0.5 if name == "resumed" else step + 0.5
                label = name if i == 0 and ax is axes[0] else None
                ax.axvline(at, ls=style, color=color, lw=width, alpha=alpha, gid=name, label=label)
        if marks[name]:
            axes[0].legend()
    return fig


def plot_log(log, out=None) -> Path:
    """Draw a run's metrics.csv (``log``: the file or its log_dir) with :func:`plot_history`; return the image's path.

    ``out`` defaults to ``metrics.png`` beside the log; its suffix picks the format (``gputrain plot``).
    """
    from matplotlib.figure import Figure  # no pyplot: no window, no backend to choose

    log = Path(log)
    path = log / "metrics.csv" if log.is_dir() else log
    if not path.is_file():
        where = f"no metrics.csv in {str(log)!r}" if log.is_dir() else f"{str(log)!r} not found"
        raise FileNotFoundError(f"{where}; pass the --log-dir of a run (or its metrics.csv)")
    out = Path(out) if out is not None else path.with_suffix(".png")
    fig = Figure(figsize=(13, 3.4), layout="constrained")
    formats = fig.canvas.get_supported_filetypes()
    if out.suffix.lstrip(".").lower() not in formats:
        raise ValueError(f"--out {str(out)!r}: name an image file ending in one of .{', .'.join(sorted(formats))}")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"--out {str(out)!r}: the folder {str(out.parent)!r} does not exist")
    history = read_history(path)
    if not history["step"]:
        raise ValueError(f"{str(path)!r} has no rows yet: the run has not finished a step")
    plot_history(history, axes=fig.subplots(1, 3))
    fig.suptitle(str(path))
    try:
        fig.savefig(out)
    except OSError as exc:
        raise ValueError(f"could not write --out {str(out)!r} ({exc.strerror or exc})") from None
    return out

"""The training loop (chapter 6): ``train(cfg) -> TrainResult`` on Hugging Face Accelerate.

Built the way Accelerate's own examples are: one ``Accelerator``, one
``prepare``, ``accumulate``, ``backward``, ``clip_grad_norm_``,
``gather_for_metrics``, ``main_process_first`` and ``accelerator.print``;
the step itself is :func:`gputrain.train.step.train_step`.  The same code
runs on a CPU, one GPU, or several processes under ``accelerate launch`` or
``torchrun`` (DDP).

Around the step sit the parts a long run needs: a validation pass, early
stopping that restores the best weights, the step guard, a CSV log,
checkpoints written atomically, a resume that continues the checkpoint's own
run (:mod:`~gputrain.train.resume`), directories probed and locked before the
first step (:mod:`~gputrain.train.rundir`), and Ctrl-C or SIGTERM ending the
run after the current step with a checkpoint
(:mod:`~gputrain.train.interrupt`).  A run's position is one
:class:`~gputrain.train.progress.Progress` (saved in every checkpoint).

The run is built in :mod:`~gputrain.train.start` (its checks in
:mod:`~gputrain.train.hardware` and :mod:`~gputrain.train.preflight`);
:class:`_Run` adds one method per phase, so each reads in one sitting.
Imports flow one way::

    progress   Progress, TrainResult, the closing line
    hardware   check_hardware, make_accelerator
    preflight  check_fresh, read_resume, claim: the checks before anything is written
    start      RunSetup: the checks in order, then the run's objects
    loop       train() and _Run's phases: steps, validation, checkpoints, result
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Optional

import torch
import torch.nn as nn
from accelerate.state import AcceleratorState, GradientState
from torch.utils.data import Dataset

from ..moe import update_router_biases
from ..speed import fp32_matmul, keep_freed_memory
from .checkpoint import SaveError, checkpoint_path, checkpoint_step, load_weights, save_checkpoint
from .config import TrainConfig

# names of the run's setup, now in their own modules, stay importable from here (noqa: re-exported)
from .hardware import Bf16SlowWarning, check_hardware, make_accelerator  # noqa: F401
from .interrupt import StopSignals, agree
from .preflight import ALLOW, check_fresh, read_resume  # noqa: F401
from .progress import Progress, TrainResult, interrupt_line, summary_line  # noqa: F401
from .runlog import event_steps
from .start import BestWeights, RunSetup  # noqa: F401
from .step import Batch, TrainingDiverged, evaluate, train_step


def train(
    cfg: TrainConfig,
    *,
    model: Optional[nn.Module] = None,
    train_data: Optional[Dataset] = None,
    val_data: Optional[Dataset] = None,
    batch_hook: Optional[Callable[[int, Batch], Batch]] = None,
    data_notice: Optional[Callable[[str], None]] = None,
    model_config: Optional[dict] = None,
) -> TrainResult:
    """Train a GPT on ``cfg.data`` (or ``model`` on ``train_data``) and return its history and the model.

    ``model(x, y)`` must return ``(output, mean loss)`` (wrap a plain model in
    :class:`~gputrain.train.WithLoss`).  ``batch_hook(step, (x, y))`` may
    replace each micro-batch: chapter 6 corrupts one with it and augments
    images on the fly.  The ``data:`` line (how much of ``cfg.data`` the run
    reads) is printed with ``cfg.progress``; without it, it goes to
    ``data_notice`` if given (``gputrain train --no-progress`` prints it).
    ``model_config`` describes a ``model`` passed in so that its checkpoints
    load back without the code that built it (fine-tuning records its base
    GPT's shape and adapters there, chapter 12); a GPT built here records its own.
    Every bad input (config, data, checkpoint, a directory that cannot be
    written or that another run holds) raises before anything is written.
    Ctrl-C or SIGTERM ends the run after the current step with a checkpoint
    (``result.interrupted`` names the signal); a second one stops it at once.
    Chapter 6 explains every line.
    """
    matmuls = fp32_matmul("tf32" if cfg.tf32 else "ieee") if torch.cuda.is_available() else contextlib.nullcontext()
    keep_freed_memory()  # each step reuses the last step's buffers instead of faulting fresh pages in
    with matmuls:
        run = _Run.start(cfg, model, train_data, val_data, batch_hook, data_notice, model_config)
        try:
            with StopSignals() as signals:  # Ctrl-C / SIGTERM: finish the step, save, stop
                run.loop(signals)
        finally:
            run.close()
        return run.result()


class _Run(RunSetup):
    """One run: :class:`~gputrain.train.start.RunSetup` checks and builds it; each method below is one phase of
    :func:`train`."""

    def loop(self, signals: Optional[StopSignals] = None) -> None:
        """Steps until ``max_steps``, early stopping or a signal (after its step), then the final checkpoint."""
        cfg = self.cfg
        while self.progress.step < cfg.max_steps and not self.nothing_to_do:
            step = self.one_step(signals)  # it learns (on every rank alike) whether a signal stops the run
            if cfg.checkpoint_dir and cfg.checkpoint_interval and step % cfg.checkpoint_interval == 0:
                self.last_ckpt = self.checkpoint()
            if self.stopped_early:
                self.say(
                    f"early stop at step {step}: validation loss has not improved for {cfg.patience} "
                    f"evaluations; restoring the weights of step {self.progress.best_step}"
                )
                break
            if self.interrupted:
                break
        self.seconds = max(time.perf_counter() - self.t0, 1e-9)
        if cfg.checkpoint_dir and (self.last_ckpt is None or checkpoint_step(self.last_ckpt) != self.progress.step):
            self.last_ckpt = self.checkpoint()

    def one_step(self, signals: Optional[StopSignals] = None) -> int:
        """One optimizer step with its bookkeeping: history, guard events, validation, log, progress bar.

        Its log row's event names the guard's event and what happened to the run at that step: ``resumed``
        (the first step after a resume) and ``interrupted`` (a signal stops the run after it), for ``gputrain plot``.
        """
        cfg, p, t_step = self.cfg, self.progress, time.perf_counter()
        micro = []
        for _ in range(cfg.grad_accum_steps):
            p.epoch, p.batch, batch = next(self.batches)
            micro.append(self.batch_hook(p.step + 1, batch) if self.batch_hook else batch)
        lr = self.scheduler.get_last_lr()[0]
        stats = train_step(self.model, micro, self.optimizer, self.accelerator, cfg.grad_clip, accept=self.guard)
        if stats.applied and self.has_moe:
            update_router_biases(self.model)  # aux-loss-free balancing after each applied update (chapter 9)
        step_seconds = time.perf_counter() - t_step
        self.scheduler.step()
        p.step = step = p.step + 1
        step_tokens = sum(b[1].numel() for b in micro) * self.accelerator.num_processes
        self.tokens += step_tokens
        p.losses.append(stats.loss if math.isfinite(stats.loss) else math.nan)
        p.lrs.append(lr)
        p.grad_norms.append(stats.grad_norm if math.isfinite(stats.grad_norm) else math.nan)
        event = self.guard.event
        if event:
            self.say(f"step {step}: {event} (loss {stats.loss:.4g}, grad norm {stats.grad_norm:.4g})")
        val = self.validate(step)
        self.interrupted = signals.agreed(self.accelerator) if signals else None  # the same on every rank
        resumed = self.resumed_step and step == self.resumed_step + 1
        event = " ".join(
            e for e in (event, "resumed" if resumed else "", "interrupted" if self.interrupted else "") if e
        )
        if event:
            p.events[str(step)] = event
        self.log.row(
            step=step,
            epoch=round(step / self.steps_per_epoch, 4),
            loss=stats.loss,
            val_loss=val,
            lr=lr,
            grad_norm=stats.grad_norm,
            tokens_per_s=round(step_tokens / step_seconds, 1),
            event=event,
        )
        if self.guard.bad_in_row >= cfg.max_bad_steps:
            kept = f"; the last good checkpoint is {str(self.last_ckpt)!r}" if self.last_ckpt else ""
            raise TrainingDiverged(
                f"{self.guard.bad_in_row} steps in a row had a non-finite loss or gradient "
                f"(up to step {step}); none reached the weights{kept}; "
                "lower --lr or check the data"
            )
        self.bar.set_postfix(
            loss=f"{stats.loss:.3f}", tok_s=f"{self.tokens / (time.perf_counter() - self.t0):,.0f}", refresh=False
        )
        self.bar.update()
        return step

    def unwrapped(self) -> nn.Module:
        """The trained model without its wrappers (DDP, FSDP, torch.compile).

        ``accelerator.unwrap_model`` asks whether the model is compiled, which
        imports ``torch._dynamo`` (1.2 s or more, 75-150 MiB) even where nothing
        was; a model that prepare() returned as it was given has no wrapper.
        """
        return self.raw_model if self.model is self.raw_model else self.accelerator.unwrap_model(self.model)

    def validate(self, step: int) -> "float | str":
        """A validation pass when one is due (``''`` otherwise); feeds early stopping."""
        cfg = self.cfg
        if not cfg.eval_interval or (step % cfg.eval_interval and step != cfg.max_steps):
            return ""
        val = evaluate(self.model, self.val_loader, self.accelerator, cfg.eval_batches)
        self.progress.val_losses.append((step, val))
        self.stopped_early = self.best.update(step, val, self.unwrapped(), self.accelerator.is_main_process)
        return val

    def checkpoint(self) -> Path:
        """Save on the main process (the others wait): weights, optimizer, schedule, RNG and :class:`Progress`."""
        p, path = self.progress, None
        p.bad_in_row = self.guard.bad_in_row
        p.detector = self.guard.detector.state_dict() if self.guard.detector else None
        error = None
        if self.accelerator.is_main_process:
            try:
                path = save_checkpoint(
                    self.cfg.checkpoint_dir,
                    p.step,
                    self.unwrapped(),
                    self.optimizer,
                    self.scheduler,
                    p.to_dict(),
                    self.model_config,
                    keep=self.cfg.keep_checkpoints,
                    run={
                        "optimizer": self.cfg.optimizer,
                        "schedule": self.cfg.schedule,
                        "config": asdict(self.cfg),
                        "world_size": self.accelerator.num_processes,  # the global batch is batch_size x this
                        "data_sha256": self.data_sha256,  # the corpus's tokens: a resume must train on the same
                    },
                )
            except SaveError as exc:  # a full disk: no partial checkpoint left, the previous one intact
                error = exc
        if not agree(self.accelerator, error is None):  # also the barrier the other ranks wait at
            raise error or SaveError("the main process could not write the checkpoint (its error says why)")
        return path or checkpoint_path(self.cfg.checkpoint_dir, p.step)

    def close(self) -> None:
        self.bar.close()
        try:
            self.log.close()
            if self.cfg.tensorboard and not self.nothing_to_do:
                self.accelerator.end_training()
        finally:
            self.dirs.release()

    def result(self) -> TrainResult:
        """The finished run as a :class:`TrainResult` (best weights restored under early stopping)."""
        cfg, p = self.cfg, self.progress
        unwrapped = self.unwrapped()
        if cfg.patience and self.best.state is not None:
            load_weights(unwrapped, *self.best.state)
        skipped, spikes = event_steps(p.events.items())
        result = TrainResult(
            losses=p.losses,
            val_losses=list(p.val_losses),
            lrs=p.lrs,
            grad_norms=p.grad_norms,
            tokens_per_s=self.tokens / self.seconds,
            seconds=self.seconds,
            model=unwrapped,
            config=cfg,
            steps=p.step,
            epochs=p.step / self.steps_per_epoch,
            skipped=skipped,
            spikes=spikes,
            stopped_early=self.stopped_early,
            best_step=p.best_step,
            best_val_loss=p.best_val,
            checkpoint=self.last_ckpt,
            is_main_process=self.accelerator.is_main_process,
            log_path=self.log.path,
            resumed_step=self.resumed_step,
            interrupted=self.interrupted,
            nothing_to_do=self.nothing_to_do,
        )
        if cfg.progress and not self.nothing_to_do:
            self.accelerator.print(interrupt_line(result) if self.interrupted else summary_line(result))
        AcceleratorState._reset_state(reset_partial_state=False)  # leave no settings behind for the next run
        GradientState._reset_state()
        return result

"""The run's setup (chapter 6): everything :func:`~gputrain.train.train` checks and builds before its first step.

:meth:`RunSetup.start` checks the hardware, the data, the checkpoint to resume
and the directories, in that order, and only then builds the run: the
optimizer and its schedule, the checkpoint's state applied, the data loaders,
``accelerator.prepare``, the step guard, the log and the progress bar.
Nothing is written before it returns.  The phases that follow (the steps,
validation, checkpoints, the result) are :class:`~gputrain.train.loop._Run`'s.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import torch
import torch.nn as nn
from accelerate.utils import DistributedType, set_seed
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from ..model import GPT
from ..moe import MoE
from .checkpoint import (
    Checkpoint,
    best_weights_path,
    load_trainer_state,
    load_weights,
    read_best_weights,
    save_best_weights,
    weights_of,
)
from .components import lr_lambda, make_optimizer
from .config import TrainConfig
from .hardware import check_hardware, make_accelerator
from .inputs import EpochSampler, build_data, endless_batches
from .preflight import check_fresh, claim, read_resume
from .progress import Progress
from .resume import finished
from .rundir import RunDirectories
from .runlog import RunLog
from .step import StepGuard


def _reapply(optimizer, scheduler, fresh: list[dict]) -> None:
    """After loading a checkpoint, use this run's hyperparameters (``fresh`` groups) rather than the saved ones.

    Only with ``allow_config_change``: the learning rate follows this run's
    ``lr`` and schedule from the step reached; betas and weight decay are this run's.
    """
    for group, new in zip(optimizer.param_groups, fresh):
        group.update({k: v for k, v in new.items() if k != "lr"})
    scheduler.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
    rates = [base * f(scheduler.last_epoch) for base, f in zip(scheduler.base_lrs, scheduler.lr_lambdas)]
    for group, rate in zip(optimizer.param_groups, rates):
        group["lr"] = rate
    scheduler._last_lr = rates


class BestWeights:
    """Early stopping's memory: the best validation loss so far and the weights that made it."""

    def __init__(self, cfg: TrainConfig, progress: Progress, ckpt: Optional[Checkpoint]):
        self.cfg, self.progress, self.state = cfg, progress, None
        if ckpt and cfg.patience and progress.best_step:
            self.state = read_best_weights(best_weights_path(ckpt.path.parent))

    def update(self, step: int, val: float, model: nn.Module, main_process: bool) -> bool:
        """Record a validation loss; return True when the patience has run out."""
        p = self.progress
        if val < p.best_val:
            p.best_val, p.best_step, p.evals_since_best = val, step, 0
            if self.cfg.patience:  # a CPU copy of the weights, and one on disk for a resumed run
                self.state = weights_of(model)
                if self.cfg.checkpoint_dir and main_process:
                    save_best_weights(self.cfg.checkpoint_dir, self.state)
            return False
        p.evals_since_best += 1
        return bool(self.cfg.patience) and p.evals_since_best >= self.cfg.patience


class RunSetup:
    """One run's objects, checked and made in order by :meth:`start`; :class:`~gputrain.train.loop._Run` adds the
    phases that use them."""

    @classmethod
    def start(
        cls, cfg: TrainConfig, model, train_data, val_data, batch_hook, data_notice=None, model_config=None
    ) -> "RunSetup":
        """Check everything that can be wrong, then build the run; nothing is written before this returns."""
        check_hardware(cfg)
        if (model is None) != (train_data is None) or (train_data is None) != (val_data is None):
            raise ValueError("pass model, train_data and val_data together, or none of them")
        accelerator = make_accelerator(cfg)
        set_seed(cfg.seed)
        own_data = train_data is None  # the run reads cfg.data itself
        if own_data:
            with accelerator.main_process_first():  # reading and tokenizing happens once per machine first
                say = accelerator.print if cfg.progress else data_notice if accelerator.is_main_process else None
                train_data, val_data = build_data(cfg, say=say)
            model = GPT(cfg.model_config())
            model_config = asdict(model.cfg)
        need = cfg.batch_size * accelerator.num_processes
        if len(train_data) < need:
            raise ValueError(
                f"the training split holds {len(train_data)} samples, fewer than one batch of {need} "
                f"({accelerator.num_processes} processes x batch_size {cfg.batch_size}); "
                + (f"use more text, a smaller val_fraction (now {cfg.val_fraction}) or " if own_data else "use ")
                + "a smaller batch_size"
            )
        ckpt, notes = None, []
        if cfg.resume_from:
            text = getattr(train_data, "corpus_sha256", None)  # None: data the caller passed in
            ckpt, notes = read_resume(cfg, model, model_config, accelerator.num_processes, text)
        done = finished(cfg, ckpt.step, ckpt.meta["progress"]) if ckpt else None
        dirs = RunDirectories({"checkpoint_dir": cfg.checkpoint_dir, "log_dir": cfg.log_dir})
        if not done:  # a finished run writes nothing and needs no lock
            claim(dirs, accelerator)
        try:
            if not ckpt:
                check_fresh(cfg)  # after the lock: a run still going there is named as such
            if cfg.activation_checkpointing:
                from ..memory import apply_activation_checkpointing  # chapter 7's tools: loaded only when used

                apply_activation_checkpointing(model)
            run = cls(cfg, accelerator, model, model_config, train_data, val_data, ckpt, batch_hook, dirs, done)
            for note in notes:
                run.tell(note)
            return run
        except BaseException:
            dirs.abandon()  # the locks and the directories the probe made: nothing written
            raise

    def __init__(self, cfg, accelerator, model, model_config, train_data, val_data, ckpt, batch_hook, dirs, done):
        self.cfg, self.accelerator, self.model_config, self.batch_hook = cfg, accelerator, model_config, batch_hook
        self.dirs, self.nothing_to_do = dirs, done
        self.data_sha256 = getattr(train_data, "corpus_sha256", None)
        optimizer = make_optimizer(model, cfg)
        # The schedule counts optimizer steps.  It is not passed to prepare():
        # Accelerate would step it once per process per step.
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg))
        self.progress = Progress()
        if ckpt:  # everything validated: now apply it
            load_weights(model, ckpt.weights, ckpt.aliases)
            fresh = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
            self.progress = Progress.from_dict(load_trainer_state(ckpt, optimizer, self.scheduler))
            saved = ckpt.meta.get("run", {}).get("world_size") or accelerator.num_processes
            # batches done in the epoch, counted in this run's processes: each process takes every n-th batch
            self.progress.batch = self.progress.batch * saved // accelerator.num_processes
            if cfg.allow_config_change:  # this config's hyperparameters, not the checkpoint's
                _reapply(optimizer, self.scheduler, fresh)
        self.best = BestWeights(cfg, self.progress, ckpt)
        train_loader = DataLoader(
            train_data,
            batch_size=cfg.batch_size,
            drop_last=True,
            sampler=EpochSampler(len(train_data), cfg.seed),
            generator=torch.Generator().manual_seed(cfg.seed),
        )  # global RNG untouched
        val_loader = DataLoader(
            val_data, batch_size=cfg.batch_size, shuffle=False, generator=torch.Generator().manual_seed(cfg.seed)
        )
        self.has_moe = any(isinstance(m, MoE) for m in model.modules())  # found once, not every step
        # The model is placed on the device as Accelerate would place it: saying so up front spares prepare()
        # its check for sharded (DTensor) parameters, an import of torch.distributed.tensor and sympy (0.3-0.8 s
        # of a CPU run's start); gputrain's model has none before prepare() shards it under FSDP.
        place = accelerator.device_placement and accelerator.distributed_type != DistributedType.FSDP
        self.raw_model = model
        self.model, self.optimizer, train_loader, self.val_loader = accelerator.prepare(
            model, optimizer, train_loader, val_loader, device_placement=[place, None, None, None]
        )
        self.steps_per_epoch = len(train_loader) / cfg.grad_accum_steps
        self.batches = endless_batches(train_loader, accelerator, self.progress.epoch, self.progress.batch)
        self.guard = StepGuard(
            cfg.spike_window, cfg.spike_threshold, cfg.skip_spikes, fp16_scaler=accelerator.scaler is not None
        )
        self.guard.bad_in_row = self.progress.bad_in_row
        if self.guard.detector and self.progress.detector:
            self.guard.detector.load_state_dict(self.progress.detector)
        self.log = self._open_log(ckpt.step if ckpt else 0)
        self.show = cfg.progress and accelerator.is_main_process and not done
        self.bar = tqdm(
            total=cfg.max_steps, initial=self.progress.step, disable=not self.show, desc="train", unit="step"
        )
        self.last_ckpt: Optional[Path] = ckpt.path if ckpt else None
        self.resumed_step, self.interrupted = (ckpt.step if ckpt else 0), None
        self.stopped_early, self.tokens, self.t0, self.seconds = False, 0, time.perf_counter(), 0.0
        if done:
            self.say(f"nothing to do: checkpoint {str(ckpt.path)!r} is {done}")
        elif ckpt:
            self.say(f"Resumed from step {ckpt.step} of {cfg.max_steps} (checkpoint {str(ckpt.path)!r})")

    def _open_log(self, resumed_step: int) -> RunLog:
        """metrics.csv: a resumed run keeps the rows already logged up to its checkpoint (restoring missing ones)."""
        cfg, p = self.cfg, self.progress
        if self.nothing_to_do:
            return RunLog(cfg, self.accelerator, [], write=False)
        if cfg.tensorboard:
            self.accelerator.init_trackers(
                "gputrain", config={k: v for k, v in asdict(cfg).items() if isinstance(v, (int, float, str, bool))}
            )
        val_at = dict(p.val_losses)
        rows = [
            {
                "step": s,
                "epoch": round(s / self.steps_per_epoch, 4),
                "loss": loss,
                "val_loss": val_at.get(s, ""),
                "lr": lr,
                "grad_norm": norm,
                "tokens_per_s": "",
                "event": p.events.get(str(s), ""),
            }
            for s, (loss, lr, norm) in enumerate(zip(p.losses, p.lrs, p.grad_norms), 1)
        ]
        return RunLog(cfg, self.accelerator, rows, resumed=bool(resumed_step))

    def say(self, message: str) -> None:
        if self.cfg.progress:
            (self.bar.write if self.show else self.accelerator.print)(message)

    def tell(self, message: str) -> None:
        """A line every run says (a change that makes it differ from an uninterrupted one): stderr without progress."""
        if self.cfg.progress:
            self.say(message)
        elif self.accelerator.is_main_process:
            print(f"gputrain: {message}", file=sys.stderr, flush=True)

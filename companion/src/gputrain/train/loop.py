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
(:mod:`~gputrain.train.interrupt`).  A run's position is one :class:`Progress`
(saved in every checkpoint); :class:`_Run` holds the run's objects and has
one method per phase, so each reads in one sitting.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable, Optional

import torch
import torch.nn as nn
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin, GradientAccumulationPlugin, set_seed
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from ..model import GPT
from ..moe import MoE, update_router_biases
from ..speed import fp32_matmul, keep_freed_memory, native_bf16
from .checkpoint import (
    Checkpoint,
    CheckpointError,
    SaveError,
    best_weights_path,
    check_compatible,
    checkpoint_path,
    checkpoint_step,
    list_checkpoints,
    load_trainer_state,
    load_weights,
    read_best_weights,
    read_checkpoint,
    save_best_weights,
    save_checkpoint,
    weights_of,
)
from .components import lr_lambda, make_optimizer
from .config import TrainConfig
from .inputs import EpochSampler, build_data, endless_batches
from .interrupt import StopSignals, agree
from .resume import check_resume, finished
from .rundir import RunDirectories
from .runlog import RunLog, event_steps
from .step import Batch, StepGuard, TrainingDiverged, evaluate, train_step


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


class Bf16SlowWarning(UserWarning):
    """bf16 asked for on a CPU that converts every bf16 operand in software (shown once per process)."""


def check_hardware(cfg: TrainConfig) -> None:
    """One clear error where Accelerate would silently fall back (fp16 on a CPU) or fail deep inside."""
    cuda = torch.cuda.is_available()
    if cfg.mixed_precision == "fp16" and not cuda:
        raise ValueError(
            "mixed_precision='fp16' needs a CUDA GPU (on a CPU Accelerate silently trains in fp32); use 'bf16' or 'no'"
        )
    if cfg.mixed_precision == "bf16" and cuda and not torch.cuda.is_bf16_supported():
        raise ValueError("mixed_precision='bf16' needs an Ampere or newer GPU; use 'fp16' or 'no'")
    if cfg.mixed_precision == "bf16" and not cuda and not (bf16 := native_bf16("cpu")).native:
        warnings.warn(
            f"mixed_precision='bf16' on a CPU without native bf16: {bf16}; this run will be slower "
            "than with mixed_precision='no' (chapter 7 emulates bf16 in FP32 instead)",
            Bf16SlowWarning,
            stacklevel=4,  # the line that called train()
        )
    if cfg.mixed_precision == "fp8":
        if not cuda or torch.cuda.get_device_capability() < (8, 9):
            raise ValueError(
                "mixed_precision='fp8' needs an FP8 GPU (compute capability 8.9+: Ada, Hopper); use 'bf16' here"
            )
        if not any(importlib.util.find_spec(m) for m in ("torchao", "transformer_engine", "msamp")):
            raise ValueError("mixed_precision='fp8' needs an FP8 backend: pip install torchao")
    if cfg.fsdp and not cuda:
        raise ValueError(
            "fsdp=True needs CUDA GPUs: Accelerate shards only there (on a CPU it silently runs DDP); drop --fsdp"
        )
    if cfg.fsdp and (cfg.checkpoint_dir or cfg.resume_from or cfg.patience):
        # both need whole (gathered) weights from sharded DTensors, which this loop does not do yet
        raise ValueError(
            "checkpoints and early stopping with fsdp=True are not supported by "
            "gputrain.train yet; drop --checkpoint-dir/--resume-from/--patience or --fsdp"
        )


def make_accelerator(cfg: TrainConfig) -> Accelerator:
    """The run's one Accelerator (any state left by an earlier run in this process is reset first)."""
    AcceleratorState._reset_state(reset_partial_state=False)  # keeps the process group, drops old settings
    GradientState._reset_state()
    fsdp_plugin = None
    if cfg.fsdp:
        fsdp_plugin = FullyShardedDataParallelPlugin(
            fsdp_version=2,
            reshard_after_forward=True,
            auto_wrap_policy="transformer_based_wrap",
            transformer_cls_names_to_wrap=["Block"],
            cpu_ram_efficient_loading=False,
        )
    accelerator = Accelerator(
        mixed_precision=cfg.mixed_precision,
        cpu=not torch.cuda.is_available(),
        fsdp_plugin=fsdp_plugin,
        gradient_accumulation_plugin=GradientAccumulationPlugin(
            num_steps=cfg.grad_accum_steps, sync_with_dataloader=False
        ),
        dynamo_backend="inductor" if cfg.compile else "no",
        log_with="tensorboard" if cfg.tensorboard else None,
        project_dir=cfg.log_dir or None,
    )
    if cfg.fsdp and accelerator.distributed_type != DistributedType.FSDP:
        raise ValueError("fsdp=True needs a distributed launch: accelerate launch --use_fsdp ... or torchrun")
    return accelerator


def check_fresh(cfg: TrainConfig) -> None:
    """A fresh run never writes over another run's checkpoints or log: one clear error naming what works."""
    ckpts = list_checkpoints(cfg.checkpoint_dir) if cfg.checkpoint_dir else []
    if ckpts:
        raise ValueError(
            f"checkpoint_dir={cfg.checkpoint_dir!r} already holds another run's files; pass "
            f"--resume-from {cfg.checkpoint_dir} to continue it, or choose an empty directory"
        )
    if cfg.log_dir and (Path(cfg.log_dir) / "metrics.csv").exists():
        raise ValueError(
            f"log_dir={cfg.log_dir!r} already holds another run's metrics.csv; choose an empty --log-dir, "
            "or continue that run by passing its checkpoint_dir to --resume-from (it keeps writing this log)"
        )


def read_resume(
    cfg: TrainConfig, model: nn.Module, model_config: Optional[dict], world_size: int = 1, data: Optional[str] = None
) -> tuple[Checkpoint, list[str]]:
    """Read and verify the checkpoint to resume from, and check that ``cfg`` may continue it (chapter 6).

    ``world_size``: this run's processes; ``data``: the SHA-256 of its corpus's
    tokens (None for data the caller passed in).  Called before anything is
    written: every problem is one clear error.  Returns the checkpoint and one
    line for each change ``allow_config_change`` let through.
    """
    ckpt = read_checkpoint(cfg.resume_from)
    check_compatible(ckpt, model, model_config)
    run = ckpt.meta.get("run", {})
    for name in ("optimizer", "schedule"):  # checkpoints written without their config name these two
        saved = run.get(name)
        if not run.get("config") and saved is not None and saved != getattr(cfg, name):
            raise CheckpointError(
                f"checkpoint {str(ckpt.path)!r} was trained with {name}={saved!r}, this run "
                f"asks for {getattr(cfg, name)!r}; resume with --{name} {saved}"
            )
    later = []
    if cfg.checkpoint_dir:  # a corrupt newer checkpoint does not count: the run saves over it
        later = [p for p in list_checkpoints(cfg.checkpoint_dir) if checkpoint_step(p) > ckpt.step and _readable(p)]
    if later:
        raise CheckpointError(
            f"{str(later[-1])!r} is newer than the checkpoint to resume from; "
            f"resume from it (--resume-from {later[-1].parent}) or write to a fresh --checkpoint-dir"
        )
    check_resume(cfg, run.get("config") or {}, ckpt.path)
    best_path = best_weights_path(ckpt.path.parent)
    if cfg.patience and ckpt.meta["progress"]["best_step"] and not best_path.exists():
        raise CheckpointError(f"{str(best_path)!r} is missing; early stopping cannot restore the best weights")
    return ckpt, _same_processes(cfg, ckpt, world_size) + _same_text(cfg, ckpt, data)


ALLOW = "pass --allow-config-change (from Python: allow_config_change=True)"


def _same_processes(cfg: TrainConfig, ckpt: Checkpoint, world_size: int) -> list[str]:
    """A checkpoint continues with the processes that wrote it: their number sets the global batch and the epochs.

    Checkpoints written before the number was stored (no ``world_size``) are not checked.
    """
    saved = ckpt.meta.get("run", {}).get("world_size")
    if saved is None or saved == world_size:
        return []
    windows = cfg.batch_size * cfg.grad_accum_steps
    batch = f"the global batch {'would change' if not cfg.allow_config_change else 'changes'} from "
    batch += f"{saved * windows:,} to {world_size * windows:,} windows per step, and the epochs with it"
    if not cfg.allow_config_change:
        launch = (
            "in one process"
            if saved == 1
            else f"with {saved} processes (accelerate launch --multi_gpu --num_processes {saved} -m gputrain train ...)"
        )
        raise CheckpointError(
            f"checkpoint {str(ckpt.path)!r} was trained by {saved} process{'es' if saved > 1 else ''}, this run has "
            f"{world_size}: {batch}; resume it {launch}, or {ALLOW} to continue with {world_size}"
        )
    return [f"processes: {saved} -> {world_size} ({batch}; the position in the epoch is carried over)"]


def _same_text(cfg: TrainConfig, ckpt: Checkpoint, data: Optional[str]) -> list[str]:
    """A resume trains on the text the checkpoint was trained on: the same tokens, by their SHA-256."""
    saved = ckpt.meta.get("run", {}).get("data_sha256")
    if saved is None or data is None or saved == data:
        return []
    what = f"the text of data={cfg.data!r} is not the text checkpoint {str(ckpt.path)!r} was trained on"
    hashes = f"SHA-256 of its tokens {saved[:12]} then, {data[:12]} now"
    if not cfg.allow_config_change:
        raise CheckpointError(f"{what} ({hashes}); restore that text, or {ALLOW} to continue on the new text")
    return [f"data: {what} ({hashes}); continuing on the new text (allowed by --allow-config-change)"]


def _readable(path: Path) -> bool:
    """Whether a checkpoint passes verification (a corrupt newer one does not block resuming an older one)."""
    try:
        read_checkpoint(path)
    except CheckpointError:
        return False
    return True


def _claim(dirs: RunDirectories, accelerator: Accelerator) -> None:
    """Probe and lock the run's directories on the main process; every rank fails together if that fails."""
    error = None
    if accelerator.is_main_process:
        try:
            dirs.claim()
        except ValueError as exc:
            error = exc
    if not agree(accelerator, error is None):
        raise error or ValueError("the main process could not claim the run's directories (its error says why)")


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


def train(
    cfg: TrainConfig,
    *,
    model: Optional[nn.Module] = None,
    train_data: Optional[Dataset] = None,
    val_data: Optional[Dataset] = None,
    batch_hook: Optional[Callable[[int, Batch], Batch]] = None,
    data_notice: Optional[Callable[[str], None]] = None,
) -> TrainResult:
    """Train a GPT on ``cfg.data`` (or ``model`` on ``train_data``) and return its history and the model.

    ``model(x, y)`` must return ``(output, mean loss)`` (wrap a plain model in
    :class:`~gputrain.train.WithLoss`).  ``batch_hook(step, (x, y))`` may
    replace each micro-batch: chapter 6 corrupts one with it and augments
    images on the fly.  The ``data:`` line (how much of ``cfg.data`` the run
    reads) is printed with ``cfg.progress``; without it, it goes to
    ``data_notice`` if given (``gputrain train --no-progress`` prints it).
    Every bad input (config, data, checkpoint, a directory that cannot be
    written or that another run holds) raises before anything is written.
    Ctrl-C or SIGTERM ends the run after the current step with a checkpoint
    (``result.interrupted`` names the signal); a second one stops it at once.
    Chapter 6 explains every line.
    """
    matmuls = fp32_matmul("tf32" if cfg.tf32 else "ieee") if torch.cuda.is_available() else contextlib.nullcontext()
    keep_freed_memory()  # each step reuses the last step's buffers instead of faulting fresh pages in
    with matmuls:
        run = _Run.start(cfg, model, train_data, val_data, batch_hook, data_notice)
        try:
            with StopSignals() as signals:  # Ctrl-C / SIGTERM: finish the step, save, stop
                run.loop(signals)
        finally:
            run.close()
        return run.result()


class _Run:
    """One run's objects, made in order by :meth:`start`; each method below is one phase of :func:`train`."""

    @classmethod
    def start(cls, cfg: TrainConfig, model, train_data, val_data, batch_hook, data_notice=None) -> "_Run":
        """Check everything that can be wrong, then build the run; nothing is written before this returns."""
        check_hardware(cfg)
        if (model is None) != (train_data is None) or (train_data is None) != (val_data is None):
            raise ValueError("pass model, train_data and val_data together, or none of them")
        accelerator = make_accelerator(cfg)
        set_seed(cfg.seed)
        model_config = None
        if train_data is None:
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
                + (f"use more text, a smaller val_fraction (now {cfg.val_fraction}) or " if model_config else "use ")
                + "a smaller batch_size"
            )
        ckpt, notes = None, []
        if cfg.resume_from:
            text = getattr(train_data, "corpus_sha256", None)  # None: data the caller passed in
            ckpt, notes = read_resume(cfg, model, model_config, accelerator.num_processes, text)
        done = finished(cfg, ckpt.step, ckpt.meta["progress"]) if ckpt else None
        dirs = RunDirectories({"checkpoint_dir": cfg.checkpoint_dir, "log_dir": cfg.log_dir})
        if not done:  # a finished run writes nothing and needs no lock
            _claim(dirs, accelerator)
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

"""The training loop (chapter 6): ``train(cfg) -> TrainResult`` on Hugging Face Accelerate.

Built the way Accelerate's own examples are: one ``Accelerator``, one
``prepare``, ``accumulate``, ``backward``, ``clip_grad_norm_``,
``gather_for_metrics``, ``main_process_first`` and ``accelerator.print``;
the step itself is the short function :func:`train_step`.  The same code runs
on a CPU, one GPU, or several processes under ``accelerate launch`` or
``torchrun`` (DDP).

Around the step sit the parts a long run needs: a validation pass, early
stopping that restores the best weights, a loss-spike detector, a guard that
never lets a non-finite loss or gradient reach the weights, a CSV log, and
checkpoints written atomically (temporary name, fsync, rename) in safetensors
and JSON, so resuming never unpickles anything and is bitwise exact on a CPU.

The configuration (:mod:`gputrain.config`), the log (:mod:`gputrain.runlog`)
and the checkpoints (:mod:`gputrain.checkpoint`) have modules of their own;
``TrainConfig``, its presets, ``read_history`` and ``plot_history`` are
re-exported here, so ``from gputrain.train import TrainConfig, train`` is all
a script needs.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import DistributedType, GradientAccumulationPlugin, set_seed
from torch.utils.data import DataLoader, Dataset, Sampler
from tqdm.auto import tqdm

from .checkpoint import (Checkpoint, CheckpointError, best_weights_path, check_compatible, checkpoint_path,
                         checkpoint_step, list_checkpoints, load_trainer_state, load_weights, read_best_weights,
                         read_checkpoint, save_best_weights, save_checkpoint, weights_of)
from .config import PRESETS, TrainConfig, data_source, gpt2_small, preset_config, small, tiny  # noqa: F401
from .data import ByteTokenizer, TokenDataset, python_corpus, read_text_files, split_tokens
from .device import first_line
from .metrics import SpikeDetector, fp32_matmul
from .model import GPT
from .runlog import LOG_COLUMNS, RunLog, event_steps, plot_history, read_history  # noqa: F401
from .schedule import warmup_constant, warmup_cosine

Batch = tuple[torch.Tensor, torch.Tensor]

# --- 1. data ------------------------------------------------------------------


def load_text(cfg: TrainConfig) -> str:
    """The training text: the stdlib corpus, local files, or a Hugging Face dataset's text column."""
    source = data_source(cfg)
    if source == "stdlib":
        return python_corpus(max_bytes=cfg.corpus_bytes)
    if isinstance(source, list):
        return read_text_files(source, max_bytes=cfg.corpus_bytes)
    import datasets

    name, _, split = source[3:].partition(":")
    try:
        ds = datasets.load_dataset(name, split=split or "train")
    except (ValueError, OSError) as exc:  # unknown split, no such dataset, offline: one line, not a traceback
        raise ValueError(f"data={cfg.data!r}: Hugging Face datasets could not load it ({first_line(exc)}); "
                         "check the name and split, or pass local files") from None
    column = "text" if "text" in ds.column_names else ds.column_names[0]
    parts, total = [], 0
    for row in ds:
        parts.append(str(row[column]))
        total += len(parts[-1].encode("utf-8")) + 1
        if total >= cfg.corpus_bytes:
            break
    return "\n".join(parts).encode("utf-8")[: cfg.corpus_bytes].decode("utf-8", errors="ignore")


def build_data(cfg: TrainConfig) -> tuple[TokenDataset, TokenDataset]:
    """Byte tokens of the text, split into train and validation windows of ``cfg.window`` tokens."""
    text = load_text(cfg)
    if not text:
        raise ValueError(f"the corpus from data={cfg.data!r} is empty; point --data at files with text in them")
    tokens = ByteTokenizer.encode_tensor(text)  # (N,) one token per UTF-8 byte
    train_tokens, val_tokens = split_tokens(tokens, cfg.val_fraction)
    need = cfg.window + 1
    for name, part in (("training", train_tokens), ("validation", val_tokens)):
        if len(part) < need:
            raise ValueError(f"the {name} split has {len(part)} tokens, fewer than one window of {need}; "
                             "use more text, a larger val_fraction, or a smaller seq_len")
    return TokenDataset(train_tokens, cfg.window), TokenDataset(val_tokens, cfg.window)


class EpochSampler(Sampler[int]):
    """A fresh permutation each epoch, computed from ``(seed, epoch)`` alone (chapter 6).

    The data order is then a pure function of the position (epoch, batch), so
    a resumed run sees exactly the batches the uninterrupted one would have.
    Accelerate calls :meth:`set_epoch` through its prepared loader.
    """

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return iter(torch.randperm(self.n, generator=g).tolist())


def _batches(loader, accelerator: Accelerator, epoch: int, skip: int) -> Iterator[tuple[int, int, Batch]]:
    """Endless ``(epoch, batches done in that epoch, batch)``, starting at a saved position."""
    while True:
        loader.set_epoch(epoch)
        it = accelerator.skip_first_batches(loader, skip) if skip else loader
        for i, batch in enumerate(it, start=skip + 1):
            yield epoch, i, batch
        epoch, skip = epoch + 1, 0


# --- 2. model, optimizer, schedule -------------------------------------------


class WithLoss(nn.Module):
    """Wraps a model that returns logits into the ``model(x, y) -> (logits, loss)`` form :func:`train` expects.

    Chapter 6 trains a digit classifier through it.
    """

    def __init__(self, model: nn.Module, loss_fn: Callable = F.cross_entropy):
        super().__init__()
        self.model, self.loss_fn = model, loss_fn

    def forward(self, x: torch.Tensor, y: Optional[torch.Tensor] = None):
        logits = self.model(x)  # (B, classes)
        return logits, None if y is None else self.loss_fn(logits, y)


def lr_lambda(cfg: TrainConfig) -> Callable[[int], float]:
    """Learning-rate multiplier per step: linear warmup, then cosine to ``min_lr_ratio`` or constant."""
    if cfg.schedule == "constant":
        return warmup_constant(cfg.warmup_steps, cfg.max_steps)
    return warmup_cosine(cfg.max_steps, cfg.warmup_steps, cfg.min_lr_ratio)


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW with weight decay on matrices only (not on biases, norms)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    # fused: one kernel updates every parameter on a GPU ("Making it fast"); on a CPU the
    # plain implementation is as fast and keeps results identical across torch builds
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), fused=torch.cuda.is_available())


# --- 3. the step --------------------------------------------------------------


@dataclass
class StepStats:
    loss: float  # mean loss of the step over all micro-batches and processes
    grad_norm: float  # global gradient norm before clipping
    applied: bool  # whether the update reached the weights


def train_step(model, batches: list[Batch], optimizer, accelerator: Accelerator, grad_clip: float,
               accept: Optional[Callable[[float, float], bool]] = None) -> StepStats:
    """One optimizer step over ``batches`` (gradient accumulation): forward, loss, backward, clip, update.

    Chapter 6, "The step, and the loop around it".

    ``accept(loss, grad_norm)`` decides whether the update is applied; by
    default only finite values are.  Every process computes the same decision
    because loss and norm are reduced across processes first.
    """
    total = torch.zeros((), device=accelerator.device)
    for x, y in batches:
        with accelerator.accumulate(model):  # DDP syncs gradients only on the last micro-batch
            _, loss = model(x, y)  # x (B, T), y (B, T) -> scalar
            accelerator.backward(loss)  # scaled by 1/grad_accum_steps inside
            total += loss.detach()
    mean = accelerator.reduce(total / len(batches), reduction="mean")
    # clip_grad_norm_ returns the norm before clipping; inf max_norm just measures it
    norm = accelerator.clip_grad_norm_(model.parameters(), grad_clip if grad_clip > 0 else math.inf)
    loss_value, norm_value = torch.stack([mean.float(), norm.float().to(mean.device)]).tolist()  # one sync
    applied = accept(loss_value, norm_value) if accept else math.isfinite(loss_value) and math.isfinite(norm_value)
    if applied:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return StepStats(loss_value, norm_value, applied)


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
    return torch.cat(losses).mean().item()


class StepGuard:
    """Decides whether a step's update may reach the weights, and remembers why not (chapter 6).

    Non-finite loss or gradient norm: skipped and counted.  A loss spike
    (:class:`gputrain.metrics.SpikeDetector`): logged, and skipped too when
    ``skip_spikes``.  Under fp16 a finite loss with an infinite gradient is the
    loss scaler's overflow, which its own step skips: not counted as bad data.
    """

    def __init__(self, cfg: TrainConfig, fp16_scaler: bool = False):
        self.skip_spikes, self.fp16_scaler = cfg.skip_spikes, fp16_scaler
        self.detector = SpikeDetector(cfg.spike_window, cfg.spike_threshold) if cfg.spike_window else None
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


# --- 4. train ---------------------------------------------------------------------


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
    checkpoint: Optional[Path] = None  # last checkpoint written
    is_main_process: bool = True

    def summary(self) -> dict:
        return {"first_loss": self.losses[0], "final_loss": self.losses[-1], "val_losses": self.val_losses,
                "tokens_per_s": self.tokens_per_s, "seconds": self.seconds, "steps": self.steps,
                "skipped": len(self.skipped), "spikes": len(self.spikes), "stopped_early": self.stopped_early,
                "best_val_loss": self.best_val_loss, "config": asdict(self.config)}


def check_hardware(cfg: TrainConfig) -> None:
    """One clear error where Accelerate would silently fall back (fp16 on a CPU) or fail deep inside."""
    cuda = torch.cuda.is_available()
    if cfg.mixed_precision == "fp16" and not cuda:
        raise ValueError("mixed_precision='fp16' needs a CUDA GPU (on a CPU Accelerate silently trains in fp32); "
                         "use 'bf16' or 'no'")
    if cfg.mixed_precision == "bf16" and cuda and not torch.cuda.is_bf16_supported():
        raise ValueError("mixed_precision='bf16' needs an Ampere or newer GPU; use 'fp16' or 'no'")
    if cfg.mixed_precision == "fp8":
        import importlib.util

        if not cuda or torch.cuda.get_device_capability() < (8, 9):
            raise ValueError("mixed_precision='fp8' needs an FP8 GPU (compute capability 8.9+: Ada, Hopper); "
                             "use 'bf16' here")
        if not any(importlib.util.find_spec(m) for m in ("torchao", "transformer_engine", "msamp")):
            raise ValueError("mixed_precision='fp8' needs an FP8 backend: pip install torchao")
    if cfg.fsdp and not cuda:
        raise ValueError("fsdp=True needs CUDA GPUs: Accelerate shards only there (on a CPU it silently runs DDP); "
                         "drop --fsdp")
    if cfg.fsdp and (cfg.checkpoint_dir or cfg.resume_from or cfg.patience):
        # both need whole (gathered) weights from sharded DTensors, which this loop does not do yet
        raise ValueError("checkpoints and early stopping with fsdp=True are not supported by "
                         "gputrain.train yet; drop --checkpoint-dir/--resume-from/--patience or --fsdp")


def make_accelerator(cfg: TrainConfig) -> Accelerator:
    """The run's one Accelerator (any state left by an earlier run in this process is reset first)."""
    AcceleratorState._reset_state(reset_partial_state=False)  # keeps the process group, drops old settings
    GradientState._reset_state()
    fsdp_plugin = None
    if cfg.fsdp:
        from accelerate.utils import FullyShardedDataParallelPlugin

        fsdp_plugin = FullyShardedDataParallelPlugin(
            fsdp_version=2, reshard_after_forward=True, auto_wrap_policy="transformer_based_wrap",
            transformer_cls_names_to_wrap=["Block"], cpu_ram_efficient_loading=False)
    accelerator = Accelerator(
        mixed_precision=cfg.mixed_precision, cpu=not torch.cuda.is_available(), fsdp_plugin=fsdp_plugin,
        gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=cfg.grad_accum_steps,
                                                                sync_with_dataloader=False),
        dynamo_backend="inductor" if cfg.compile else "no",
        log_with="tensorboard" if cfg.tensorboard else None, project_dir=cfg.log_dir or None)
    if cfg.fsdp and accelerator.distributed_type != DistributedType.FSDP:
        raise ValueError("fsdp=True needs a distributed launch: accelerate launch --use_fsdp ... or torchrun")
    return accelerator


def _new_progress() -> dict:
    """Everything about a run's position that a checkpoint must carry besides the tensors."""
    return {"step": 0, "epoch": 0, "batch": 0, "losses": [], "lrs": [], "grad_norms": [], "val_losses": [],
            "events": {}, "best_val": math.inf, "best_step": 0, "evals_since_best": 0, "bad_in_row": 0,
            "detector": None}


def _check_directories(cfg: TrainConfig, model: nn.Module, model_config: Optional[dict]) -> Optional[Checkpoint]:
    """Read and verify the checkpoint to resume from, or make sure a fresh run overwrites nothing.

    Called before anything is written: every problem is one clear error.
    """
    if not cfg.resume_from:
        for what, directory, name in (("checkpoint_dir", cfg.checkpoint_dir, None),
                                      ("log_dir", cfg.log_dir, "metrics.csv")):
            if directory and (list_checkpoints(directory) if name is None else (Path(directory) / name).exists()):
                raise ValueError(f"{what}={directory!r} already holds another run's files; pass "
                                 f"--resume-from {directory} to continue it, or choose an empty directory")
        return None
    ckpt = read_checkpoint(cfg.resume_from)
    check_compatible(ckpt, model, model_config)
    later = [p for p in list_checkpoints(cfg.checkpoint_dir) if checkpoint_step(p) > ckpt.step] \
        if cfg.checkpoint_dir else []
    if later:
        raise CheckpointError(f"{str(later[-1])!r} is newer than the checkpoint to resume from; "
                              "resume from the newest checkpoint or write to a fresh checkpoint_dir")
    best_path = best_weights_path(ckpt.path.parent)
    if cfg.patience and ckpt.meta["progress"]["best_step"] and not best_path.exists():
        raise CheckpointError(f"{str(best_path)!r} is missing; early stopping cannot restore the best weights")
    return ckpt


class _BestWeights:
    """Early stopping's memory: the best validation loss so far and the weights that made it."""

    def __init__(self, cfg: TrainConfig, progress: dict, ckpt: Optional[Checkpoint]):
        self.cfg, self.progress, self.state = cfg, progress, None
        if ckpt and cfg.patience and progress["best_step"]:
            self.state = read_best_weights(best_weights_path(ckpt.path.parent))

    def update(self, step: int, val: float, model: nn.Module, main_process: bool) -> bool:
        """Record a validation loss; return True when the patience has run out."""
        p = self.progress
        if val < p["best_val"]:
            p.update(best_val=val, best_step=step, evals_since_best=0)
            if self.cfg.patience:  # a CPU copy of the weights, and one on disk for a resumed run
                self.state = weights_of(model)
                if self.cfg.checkpoint_dir and main_process:
                    save_best_weights(self.cfg.checkpoint_dir, self.state)
            return False
        p["evals_since_best"] += 1
        return bool(self.cfg.patience) and p["evals_since_best"] >= self.cfg.patience


def train(cfg: TrainConfig, *, model: Optional[nn.Module] = None, train_data: Optional[Dataset] = None,
          val_data: Optional[Dataset] = None,
          batch_hook: Optional[Callable[[int, Batch], Batch]] = None) -> TrainResult:
    """Train a GPT on ``cfg.data`` (or ``model`` on ``train_data``) and return its history and the model.

    ``model(x, y)`` must return ``(output, mean loss)`` (wrap a plain model in
    :class:`WithLoss`).  ``batch_hook(step, (x, y))`` may replace each
    micro-batch: chapter 6 corrupts one with it and augments images on the fly.
    Every bad input (config, data, checkpoint) raises before anything is
    written.  Chapter 6 explains every line.
    """
    matmuls = fp32_matmul("tf32" if cfg.tf32 else "ieee") if torch.cuda.is_available() else contextlib.nullcontext()
    with matmuls:
        return _train(cfg, model=model, train_data=train_data, val_data=val_data, batch_hook=batch_hook)


def _train(cfg: TrainConfig, *, model: Optional[nn.Module], train_data: Optional[Dataset],
           val_data: Optional[Dataset], batch_hook: Optional[Callable[[int, Batch], Batch]]) -> TrainResult:
    check_hardware(cfg)
    if (model is None) != (train_data is None) or (train_data is None) != (val_data is None):
        raise ValueError("pass model, train_data and val_data together, or none of them")
    accelerator = make_accelerator(cfg)
    set_seed(cfg.seed)
    if train_data is None:
        with accelerator.main_process_first():  # reading and tokenizing happens once per machine first
            train_data, val_data = build_data(cfg)
        model = GPT(cfg.model_config())
        model_config = asdict(model.cfg)
    else:
        model_config = None
    need = cfg.batch_size * accelerator.num_processes
    if len(train_data) < need:
        raise ValueError(f"the training split holds {len(train_data)} samples, fewer than one batch of {need} "
                         f"({accelerator.num_processes} processes x batch_size {cfg.batch_size}); "
                         "use more text or a smaller batch_size")
    ckpt = _check_directories(cfg, model, model_config)
    if cfg.activation_checkpointing:
        from .memory import apply_activation_checkpointing

        apply_activation_checkpointing(model)
    optimizer = make_optimizer(model, cfg)
    # The schedule counts optimizer steps.  It is not passed to prepare():
    # Accelerate would step it once per process per step.
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg))
    progress = _new_progress()
    if ckpt:  # everything validated: now apply it
        load_weights(model, ckpt.weights, ckpt.aliases)
        progress.update(load_trainer_state(ckpt, optimizer, scheduler))
    best = _BestWeights(cfg, progress, ckpt)
    train_loader = DataLoader(train_data, batch_size=cfg.batch_size, drop_last=True,
                              sampler=EpochSampler(len(train_data), cfg.seed),
                              generator=torch.Generator().manual_seed(cfg.seed))  # keeps the global RNG untouched
    val_loader = DataLoader(val_data, batch_size=cfg.batch_size, shuffle=False,
                            generator=torch.Generator().manual_seed(cfg.seed))
    model, optimizer, train_loader, val_loader = accelerator.prepare(model, optimizer, train_loader, val_loader)

    guard = StepGuard(cfg, fp16_scaler=accelerator.scaler is not None)
    guard.bad_in_row = progress["bad_in_row"]
    if guard.detector and progress["detector"]:
        guard.detector.load_state_dict(progress["detector"])
    events: dict[str, str] = progress["events"]  # step (as text, JSON keys) -> event
    steps_per_epoch = len(train_loader) / cfg.grad_accum_steps
    if cfg.tensorboard:
        accelerator.init_trackers("gputrain", config={k: v for k, v in asdict(cfg).items()
                                                      if isinstance(v, (int, float, str, bool))})
    val_at = dict(progress["val_losses"])
    log = RunLog(cfg, accelerator, [
        {"step": s, "epoch": round(s / steps_per_epoch, 4), "loss": loss, "val_loss": val_at.get(s, ""),
         "lr": lr, "grad_norm": norm, "tokens_per_s": "", "event": events.get(str(s), "")}
        for s, (loss, lr, norm) in enumerate(zip(progress["losses"], progress["lrs"], progress["grad_norms"]), 1)])
    show = cfg.progress and accelerator.is_main_process
    bar = tqdm(total=cfg.max_steps, initial=progress["step"], disable=not show, desc="train", unit="step")

    def say(message: str) -> None:
        if cfg.progress:
            (bar.write if show else accelerator.print)(message)

    def state_for_disk() -> dict:
        return dict(progress, bad_in_row=guard.bad_in_row,
                    detector=guard.detector.state_dict() if guard.detector else None)

    def checkpoint() -> Path:
        path = None
        if accelerator.is_main_process:
            path = save_checkpoint(cfg.checkpoint_dir, progress["step"], accelerator.unwrap_model(model),
                                   optimizer, scheduler, state_for_disk(), model_config, keep=cfg.keep_checkpoints)
        accelerator.wait_for_everyone()
        return path or checkpoint_path(cfg.checkpoint_dir, progress["step"])

    batches = _batches(train_loader, accelerator, progress["epoch"], progress["batch"])
    last_ckpt, stopped_early, tokens, t0 = None, False, 0, time.perf_counter()
    try:
        while progress["step"] < cfg.max_steps:
            t_step = time.perf_counter()
            micro = []
            for _ in range(cfg.grad_accum_steps):
                progress["epoch"], progress["batch"], batch = next(batches)
                micro.append(batch_hook(progress["step"] + 1, batch) if batch_hook else batch)
            lr = scheduler.get_last_lr()[0]
            stats = train_step(model, micro, optimizer, accelerator, cfg.grad_clip, accept=guard)
            step_seconds = time.perf_counter() - t_step
            scheduler.step()
            progress["step"] = step = progress["step"] + 1
            step_tokens = sum(b[1].numel() for b in micro) * accelerator.num_processes
            tokens += step_tokens
            progress["losses"].append(stats.loss if math.isfinite(stats.loss) else math.nan)
            progress["lrs"].append(lr)
            progress["grad_norms"].append(stats.grad_norm if math.isfinite(stats.grad_norm) else math.nan)
            if guard.event:
                events[str(step)] = guard.event
                say(f"step {step}: {guard.event} (loss {stats.loss:.4g}, grad norm {stats.grad_norm:.4g})")
            val = ""
            if cfg.eval_interval and (step % cfg.eval_interval == 0 or step == cfg.max_steps):
                val = evaluate(model, val_loader, accelerator, cfg.eval_batches)
                progress["val_losses"].append((step, val))
                stopped_early = best.update(step, val, accelerator.unwrap_model(model), accelerator.is_main_process)
            log.row(step=step, epoch=round(step / steps_per_epoch, 4), loss=stats.loss, val_loss=val, lr=lr,
                    grad_norm=stats.grad_norm, tokens_per_s=round(step_tokens / step_seconds, 1),
                    event=guard.event)
            if guard.bad_in_row >= cfg.max_bad_steps:
                kept = f"; the last good checkpoint is {str(last_ckpt)!r}" if last_ckpt else ""
                raise TrainingDiverged(f"{guard.bad_in_row} steps in a row had a non-finite loss or gradient "
                                       f"(up to step {step}); none reached the weights{kept}; "
                                       "lower --lr or check the data")
            bar.set_postfix(loss=f"{stats.loss:.3f}", tok_s=f"{tokens / (time.perf_counter() - t0):,.0f}",
                            refresh=False)
            bar.update()
            if cfg.checkpoint_dir and cfg.checkpoint_interval and step % cfg.checkpoint_interval == 0:
                last_ckpt = checkpoint()
            if stopped_early:
                say(f"early stop at step {step}: validation loss has not improved for {cfg.patience} "
                    f"evaluations; restoring the weights of step {progress['best_step']}")
                break
        seconds = max(time.perf_counter() - t0, 1e-9)
        if cfg.checkpoint_dir and (last_ckpt is None or checkpoint_step(last_ckpt) != progress["step"]):
            last_ckpt = checkpoint()
    finally:
        bar.close()
        log.close()
        if cfg.tensorboard:
            accelerator.end_training()
    unwrapped = accelerator.unwrap_model(model)
    if cfg.patience and best.state is not None:
        load_weights(unwrapped, *best.state)
    skipped, spikes = event_steps(events.items())
    result = TrainResult(
        losses=progress["losses"], val_losses=[tuple(v) for v in progress["val_losses"]], lrs=progress["lrs"],
        grad_norms=progress["grad_norms"], tokens_per_s=tokens / seconds, seconds=seconds, model=unwrapped,
        config=cfg, steps=progress["step"], epochs=progress["step"] / steps_per_epoch, skipped=skipped,
        spikes=spikes, stopped_early=stopped_early, best_step=progress["best_step"],
        best_val_loss=progress["best_val"], checkpoint=last_ckpt, is_main_process=accelerator.is_main_process)
    if cfg.progress:
        val_text = f", validation {result.val_losses[-1][1]:.3f}" if result.val_losses else ""
        accelerator.print(f"trained {result.steps} steps ({result.epochs:.2f} epochs) in {seconds:.1f} s: "
                          f"loss {result.losses[0]:.3f} -> {result.losses[-1]:.3f}{val_text}, "
                          f"{result.tokens_per_s:,.0f} tokens/s")
    AcceleratorState._reset_state(reset_partial_state=False)  # leave no settings behind for the next run
    GradientState._reset_state()
    return result

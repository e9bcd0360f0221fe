"""What a run checks before it writes anything (chapter 6): a fresh run's directories, a resume's checkpoint.

:func:`check_fresh` refuses to write over another run's files;
:func:`read_resume` reads and verifies the checkpoint a run continues, with
the same processes and the same text (or says what ``allow_config_change``
lets through); :func:`claim` locks the run's directories on every rank
together.  Each problem is one clear error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch.nn as nn
from accelerate import Accelerator

from .checkpoint import (
    Checkpoint,
    CheckpointError,
    best_weights_path,
    check_compatible,
    checkpoint_step,
    list_checkpoints,
    read_checkpoint,
)
from .config import TrainConfig
from .interrupt import agree
from .resume import check_resume
from .rundir import RunDirectories


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


def claim(dirs: RunDirectories, accelerator: Accelerator) -> None:
    """Probe and lock the run's directories on the main process; every rank fails together if that fails."""
    error = None
    if accelerator.is_main_process:
        try:
            dirs.claim()
        except ValueError as exc:
            error = exc
    if not agree(accelerator, error is None):
        raise error or ValueError("the main process could not claim the run's directories (its error says why)")

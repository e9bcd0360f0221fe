"""Checkpoints that survive a crash (chapter 6).

A checkpoint is a directory ``step_00000100/`` holding ``model.safetensors``
(the weights), ``trainer.safetensors`` (optimizer tensors, RNG states, loss
history; everything else as JSON in its metadata) and ``manifest.json``
(sha256 of both).  It is written under a temporary name, every file fsynced,
then renamed: a crash at any moment leaves either the old set of checkpoints
or the new one.  Nothing is ever unpickled when one is read back, so a
checkpoint from an untrusted source cannot run code.  ``gputrain.train`` saves
and resumes through these functions.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import torch.nn as nn
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from ..model import GPTConfig
from ..results import first_line

# A checkpoint is a directory step_00000100/ holding model.safetensors (the
# weights), trainer.safetensors (optimizer tensors, RNG states, loss history;
# everything else as JSON in its metadata) and manifest.json (sha256 of both).
# It is written under a temporary name, every file fsynced, then renamed: a
# crash at any moment leaves either the old set of checkpoints or the new one.

CHECKPOINT_FORMAT = "gputrain-checkpoint-1"
_STEP_DIR = re.compile(r"^step_(\d+)$")


def checkpoint_path(directory, step: int) -> Path:
    """Where the checkpoint of ``step`` lives inside ``directory``."""
    return Path(directory) / f"step_{step:08d}"


def checkpoint_step(path) -> int:
    """The step a checkpoint directory's name records."""
    return int(_STEP_DIR.match(Path(path).name).group(1))


def best_weights_path(directory) -> Path:
    """Where early stopping keeps its best weights inside ``directory``."""
    return Path(directory) / "best.safetensors"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: corrupt, from another model shape, or missing."""


class SaveError(OSError):
    """A checkpoint that could not be written (a full disk, a lost mount); nothing partial was left behind."""


def _write_file(path: Path, data: bytes) -> None:
    """Write bytes and force them to the disk (fsync) before returning."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    """Make a rename or a new file inside ``path`` durable (the directory entry itself)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """A single file replaced all-or-nothing: temporary name, fsync, rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        _write_file(tmp, data)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise SaveError(f"could not write {str(path)!r} ({exc.strerror or exc}); the old file is intact") from None


def weights_of(model: nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """State dict without tied duplicates (safetensors stores each tensor once) and the alias map."""
    tensors, aliases, seen = {}, {}, {}
    for name, t in model.state_dict().items():
        key = (t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride()))
        if t.numel() and key in seen:
            aliases[name] = seen[key]  # e.g. head.weight -> wte.weight (weight tying)
            continue
        seen[key] = name
        tensors[name] = t.detach().to("cpu", copy=True).contiguous()
    return tensors, aliases


def _rng_state() -> tuple[dict[str, torch.Tensor], dict]:
    tensors = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = s
    name, keys, pos, has_gauss, cached = np.random.get_state()
    meta = {"python": random.getstate(), "numpy": [name, keys.tolist(), pos, has_gauss, cached]}
    return tensors, meta


def _set_rng_state(tensors: dict[str, torch.Tensor], meta: dict) -> None:
    torch.set_rng_state(tensors["rng.torch"])
    cuda = [
        tensors[k]
        for k in sorted((k for k in tensors if k.startswith("rng.cuda.")), key=lambda k: int(k.rsplit(".", 1)[1]))
    ]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda[: torch.cuda.device_count()])
    version, state, gauss = meta["python"]
    random.setstate((version, tuple(state), gauss))
    name, keys, pos, has_gauss, cached = meta["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))


def save_checkpoint(
    directory,
    step: int,
    model: nn.Module,
    optimizer,
    scheduler,
    progress: dict,
    model_config: Optional[dict] = None,
    keep: int = 2,
    run: Optional[dict] = None,
) -> Path:
    """Write ``directory/step_{step:08d}`` atomically and keep only the ``keep`` newest checkpoints.

    Chapter 6, "Checkpoints that survive a crash": temporary name, fsync of
    every file and of the directory, then one atomic rename.  ``progress`` is
    :meth:`gputrain.train.Progress.to_dict`; ``run`` names the run's choices
    (optimizer, schedule) so a resume with other ones is refused.
    """
    root = Path(directory)
    final = checkpoint_path(root, step)
    tmp = root / f".{final.name}.tmp"
    try:
        root.mkdir(parents=True, exist_ok=True)
        for stale in [*root.glob(".step_*.tmp"), *root.glob(".step_*.old")]:  # left by a run killed mid-save
            shutil.rmtree(stale, ignore_errors=True)
        tmp.mkdir()
        _write_checkpoint(tmp, model, optimizer, scheduler, progress, model_config, step, run)
        if final.exists():  # a checkpoint of this step that a resume from an earlier one is redoing
            os.rename(final, root / f".{final.name}.old")
        os.rename(tmp, final)  # atomic: the checkpoint appears complete or not at all
        _fsync_dir(root)
    except OSError as exc:  # a full disk, a lost mount: leave no partial checkpoint, keep the old ones
        shutil.rmtree(tmp, ignore_errors=True)
        kept = list_checkpoints(root)
        previous = f"the previous checkpoint {str(kept[-1])!r} is intact" if kept else "no earlier checkpoint exists"
        raise SaveError(
            f"could not write checkpoint {final.name} in {str(root)!r} ({exc.strerror or exc}); "
            f"nothing partial was left and {previous}; free space, then resume with --resume-from {root}",
        ) from None
    shutil.rmtree(root / f".{final.name}.old", ignore_errors=True)
    for old in list_checkpoints(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _write_checkpoint(tmp: Path, model, optimizer, scheduler, progress, model_config, step, run) -> None:
    """The three files of a checkpoint, each fsynced, into the (temporary) directory ``tmp``."""
    weights, aliases = weights_of(model)
    model_meta = {"format": CHECKPOINT_FORMAT, "aliases": json.dumps(aliases), "model_config": json.dumps(model_config)}
    history = ("losses", "lrs", "grad_norms")  # long float lists: tensors, not JSON
    trainer = {f"history.{name}": torch.tensor(progress[name], dtype=torch.float64) for name in history}
    meta = {
        "format": CHECKPOINT_FORMAT,
        "step": step,
        "run": run or {},
        "progress": {k: v for k, v in progress.items() if k not in history},
    }
    opt_state = optimizer.state_dict()
    meta["optimizer"] = {"param_groups": opt_state["param_groups"], "scalars": {}}
    for idx, state in opt_state["state"].items():
        for key, value in state.items():
            if torch.is_tensor(value):
                trainer[f"optim.{idx}.{key}"] = value.detach().to("cpu", copy=True).contiguous()
            else:
                meta["optimizer"]["scalars"][f"{idx}.{key}"] = value
    # LambdaLR stores None for plain-function multipliers: counters and rates are all there is to save
    meta["scheduler"] = scheduler.state_dict()
    rng_tensors, meta["rng"] = _rng_state()
    trainer.update(rng_tensors)
    files = {
        "model.safetensors": st_save(weights, metadata=model_meta),
        "trainer.safetensors": st_save(trainer, metadata={"gputrain": json.dumps(meta)}),
    }
    for name, data in files.items():
        _write_file(tmp / name, data)
    manifest = {
        "format": CHECKPOINT_FORMAT,
        "step": step,
        "sha256": {name: hashlib.sha256(data).hexdigest() for name, data in files.items()},
    }
    _write_file(tmp / "manifest.json", json.dumps(manifest, indent=1).encode())
    _fsync_dir(tmp)


def list_checkpoints(directory) -> list[Path]:
    """Complete checkpoints in ``directory``, oldest first."""
    root = Path(directory)
    found = [p for p in root.iterdir() if _STEP_DIR.match(p.name) and p.is_dir()] if root.is_dir() else []
    return sorted(found, key=checkpoint_step)


def find_checkpoint(path) -> Path:
    """``path`` itself if it is a checkpoint, else the newest checkpoint inside it."""
    path = Path(path)
    if (path / "manifest.json").exists():
        return path
    found = list_checkpoints(path)
    if not found:
        raise CheckpointError(f"no checkpoint in {str(path)!r}; pass a step_... directory written by gputrain")
    return found[-1]


@dataclass
class Checkpoint:
    """A checkpoint read and verified in memory; nothing has been applied yet."""

    path: Path
    step: int
    weights: dict[str, torch.Tensor]
    aliases: dict[str, str]
    model_config: Optional[dict]
    trainer: dict[str, torch.Tensor]
    meta: dict


def read_checkpoint(path, flag: str = "--resume-from") -> Checkpoint:
    """Read and verify a checkpoint (sha256 of every file, then safetensors and JSON only; chapter 6).

    ``flag`` is how the caller's command takes a checkpoint: a corrupt one's error names the earlier
    checkpoint with it (``--resume-from`` for ``train``, ``--checkpoint`` for ``sample`` and ``eval``).
    """
    path = find_checkpoint(path)
    try:
        manifest = json.loads((path / "manifest.json").read_text())
        if manifest.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"format {manifest.get('format')!r}, expected {CHECKPOINT_FORMAT!r}")
        blobs = {}
        for name, digest in manifest["sha256"].items():
            blobs[name] = (path / name).read_bytes()
            if hashlib.sha256(blobs[name]).hexdigest() != digest:
                raise ValueError(f"{name} does not match its sha256 in manifest.json")
        from safetensors import safe_open  # metadata lives in the header; load() returns tensors only

        def header(name):
            with safe_open(path / name, framework="pt") as f:
                return f.metadata() or {}

        model_meta, trainer_meta = header("model.safetensors"), header("trainer.safetensors")
        return Checkpoint(
            path=path,
            step=int(manifest["step"]),
            weights=st_load(blobs["model.safetensors"]),
            aliases=json.loads(model_meta["aliases"]),
            model_config=json.loads(model_meta["model_config"]),
            trainer=st_load(blobs["trainer.safetensors"]),
            meta=json.loads(trainer_meta["gputrain"]),
        )
    except Exception as exc:  # noqa: BLE001 -- any failure to read means the same thing to the user
        raise corrupt(path, first_line(exc), flag) from None


def corrupt(path: Path, reason: str, flag: str = "--resume-from") -> CheckpointError:
    """The error for a checkpoint that fails verification: it names the checkpoint to use instead, as ``flag``."""
    step = checkpoint_step(path) if _STEP_DIR.match(path.name) else -1
    earlier = [p for p in list_checkpoints(path.parent) if checkpoint_step(p) < step]
    if flag != "--resume-from":  # sample, eval: they only read it
        hint = f"use the one before it: {flag} {earlier[-1]}" if earlier else "no earlier checkpoint is left to use"
    elif earlier:
        hint = f"resume from the one before it with --resume-from {earlier[-1]} (the run saves over the corrupt one)"
    else:
        hint = "no earlier checkpoint is left: start a fresh run in an empty checkpoint_dir"
    return CheckpointError(f"checkpoint {str(path)!r} is corrupt or incomplete ({reason}); {hint}")


def check_compatible(ckpt: Checkpoint, model: nn.Module, model_config: Optional[dict]) -> None:
    """One clear error when the checkpoint was written by a model of another shape (either direction)."""
    if ckpt.model_config and model_config:
        # a field an older checkpoint predates held its default then; dropout has no shape, and the
        # attention implementation (SDPA or chapter 11's kernel) computes with the same weights
        defaults = {f.name: f.default for f in dataclasses.fields(GPTConfig)}
        stored, current = {**defaults, **ckpt.model_config}, {**defaults, **model_config}
        keys = sorted((set(stored) | set(current)) - {"dropout", "attention"})
        diff = ", ".join(
            f"{k}={stored.get(k)} (this run: {current.get(k)})" for k in keys if stored.get(k) != current.get(k)
        )
        if diff:
            raise CheckpointError(
                f"checkpoint {str(ckpt.path)!r} holds a different model: {diff}; "
                "resume with the checkpoint's shape or start a fresh checkpoint_dir"
            )
    own = model.state_dict()
    stored = set(ckpt.weights) | set(ckpt.aliases)  # tied weights are stored once, under their alias
    for name, t in ckpt.weights.items():
        if name not in own or tuple(own[name].shape) != tuple(t.shape):
            have = tuple(own[name].shape) if name in own else "no such tensor"
            raise CheckpointError(
                f"checkpoint {str(ckpt.path)!r} holds {name} of shape {tuple(t.shape)}, "
                f"this model has {have}; resume with the model that wrote it"
            )
    missing = [name for name in own if name not in stored]
    if missing:
        raise CheckpointError(
            f"checkpoint {str(ckpt.path)!r} lacks {', '.join(missing[:3])}"
            f"{' ...' if len(missing) > 3 else ''} that this model has; "
            "resume with the model that wrote it"
        )


def load_weights(model: nn.Module, weights: dict[str, torch.Tensor], aliases: dict[str, str]) -> None:
    """Copy ``weights`` into ``model``; tied weights are filled in through their alias."""
    state = dict(weights)
    for alias, target in aliases.items():
        state[alias] = state[target]
    model.load_state_dict(state)


def save_best_weights(directory, state: tuple[dict[str, torch.Tensor], dict[str, str]]) -> Path:
    """Write early stopping's best weights (from :func:`weights_of`) to ``directory/best.safetensors``, atomically."""
    path = best_weights_path(directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, st_save(state[0], metadata={"aliases": json.dumps(state[1])}))
    return path


def read_best_weights(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The weights written by :func:`save_best_weights` and their tied-parameter aliases."""
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        aliases = json.loads((f.metadata() or {}).get("aliases", "{}"))
    return st_load(path.read_bytes()), aliases


def load_trainer_state(ckpt: Checkpoint, optimizer, scheduler) -> dict:
    """Restore optimizer, scheduler and RNG states; return the saved progress (counters and history)."""
    meta = ckpt.meta
    state: dict[int, dict] = {}
    for key, value in ckpt.trainer.items():
        if key.startswith("optim."):
            _, idx, name = key.split(".", 2)
            state.setdefault(int(idx), {})[name] = value
    for key, value in meta["optimizer"]["scalars"].items():
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = value
    optimizer.load_state_dict({"state": state, "param_groups": meta["optimizer"]["param_groups"]})
    scheduler.load_state_dict(meta["scheduler"])
    _set_rng_state(ckpt.trainer, meta["rng"])
    progress = dict(meta["progress"])
    for name in ("losses", "lrs", "grad_norms"):
        progress[name] = ckpt.trainer[f"history.{name}"].tolist()
    return progress

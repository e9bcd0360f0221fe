"""Resuming a run (chapter 6): the configuration comes from the checkpoint, and only safe changes are allowed.

A checkpoint stores the whole ``TrainConfig`` it was trained with.  A resume
continues *that* run: :func:`resume_config` starts from the stored config and
applies only what the command line says explicitly.  A change of how the run
is watched, saved or computed (more steps, another log directory, the eval
cadence, ``torch.compile``) is applied with one line saying so; a change of
what it computes (the data, the batch, the learning rate ...) is refused with
one line naming the flag unless ``allow_config_change`` is set; a change that
the saved tensors cannot follow (the model's shape, the optimizer) is always
refused.  Raising ``max_steps`` keeps the schedule the checkpoint followed:
``schedule_steps`` pins its length, and the extra steps run at its final rate.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

from ..results import first_line
from .checkpoint import CHECKPOINT_FORMAT, CheckpointError, corrupt, find_checkpoint
from .components import lr_lambda
from .config import TrainConfig

# Fields a resume may change freely: how the run is watched, saved and computed, never what it computes.
SAFE = frozenset(
    {
        "max_steps",
        "compile",
        "tf32",
        "activation_checkpointing",
        "fsdp",
        "eval_interval",
        "eval_batches",
        "patience",
        "spike_window",
        "spike_threshold",
        "skip_spikes",
        "max_bad_steps",
        "checkpoint_dir",
        "checkpoint_interval",
        "keep_checkpoints",
        "resume_from",
        "allow_config_change",
        "log_dir",
        "tensorboard",
        "progress",
    }
)
# Fields whose saved tensors could not follow a change (the model's shape is checked against the weights).
FIXED = frozenset({"optimizer"})
# Reset on every resume rather than inherited: they describe this invocation, not the run.
PER_INVOCATION = ("resume_from", "allow_config_change", "progress")


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def stored_run(path) -> tuple[Path, int, dict, dict]:
    """``(checkpoint, step, config, progress)`` of a checkpoint, read from its headers (no tensors loaded).

    ``config`` is the ``TrainConfig`` the run was trained with, as a dict (empty
    for checkpoints written without one); ``progress`` its saved counters.
    """
    path = find_checkpoint(path)
    try:
        manifest = json.loads((path / "manifest.json").read_text())
        if manifest.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"format {manifest.get('format')!r}, expected {CHECKPOINT_FORMAT!r}")
        from safetensors import safe_open  # the header alone: the tensors are not read

        with safe_open(path / "trainer.safetensors", framework="pt") as f:
            meta = json.loads((f.metadata() or {})["gputrain"])
    except Exception as exc:  # noqa: BLE001 -- any failure to read means the same thing to the user
        raise corrupt(path, first_line(exc)) from None
    return path, int(manifest["step"]), meta.get("run", {}).get("config") or {}, meta.get("progress", {})


def ask(name: str, value, flags: bool) -> str:
    """How the caller sets a field: a flag for the command line (``--schedule-steps 5``), else ``schedule_steps=5``."""
    if not flags:
        return f"{name}={value!r}"
    return flag(name) if value is True else f"{flag(name)} {value}"


def _stretches(cfg: TrainConfig, length: int) -> bool:
    """Whether ``cfg``'s schedule gives another rate at some step up to ``max_steps`` than over ``length`` steps.

    Compared rate by rate: a constant schedule (after its warmup) has the same
    rates at every length, a cosine or a linear decay does not.
    """
    kept = SimpleNamespace(**{**asdict(cfg), "schedule_length": length})  # what lr_lambda reads, at the old length
    now, before = lr_lambda(cfg), lr_lambda(kept)
    return any(now(k) != before(k) for k in range(cfg.max_steps))


def check_resume(cfg: TrainConfig, saved: dict, where: Path, *, flags: bool = False) -> list[str]:
    """Refuse what a resume of ``saved`` into ``cfg`` may not change; one line for each change it may.

    Shape fields are left to :func:`~gputrain.train.checkpoint.check_compatible`,
    which compares the weights themselves.  ``flags``: the caller is the
    command line, so the errors name flags; else they name ``TrainConfig`` fields.
    """
    if not saved:
        return []  # a checkpoint written without its config: only the shape and the optimizer can be checked
    from ..model import GPTConfig  # the fields that make up the model's shape

    shape = {f.name for f in fields(GPTConfig)} - {"dropout"}
    changed = {
        name: (saved[name], value)
        for name, value in asdict(cfg).items()
        if name in saved and name not in shape and name not in PER_INVOCATION and not _same(name, saved[name], value)
    }
    for name in sorted(FIXED & set(changed)):
        old, new = changed[name]
        raise CheckpointError(
            f"checkpoint {str(where)!r} was trained with {name}={old!r}, this run asks for {new!r} "
            f"(its state cannot carry over); resume with {ask(name, old, flags)}"
        )
    safe = set(SAFE)
    length = saved.get("schedule_steps") or saved["max_steps"]  # the schedule the checkpoint followed
    allow = ask("allow_config_change", True, flags)
    if cfg.schedule_length == length or not _stretches(cfg, length):
        safe.add("schedule_steps")  # the rates the checkpoint's schedule gives: the same schedule
    elif "schedule_steps" not in changed and not cfg.allow_config_change:
        raise CheckpointError(
            f"max_steps={cfg.max_steps} would stretch the learning-rate schedule the checkpoint followed over "
            f"{length} steps; pass {ask('schedule_steps', length, flags)} to keep it (the extra steps run at its "
            f"final rate), or {allow} to stretch it"
        )
    meaning = [name for name in changed if name not in safe]
    if meaning and not cfg.allow_config_change:
        given = ", ".join(ask(n, changed[n][1], flags) for n in meaning)
        was = ", ".join(f"{n}={changed[n][0]!r}" for n in meaning)
        keep = "leave it out to keep the checkpoint's" if flags else "pass the checkpoint's values"
        raise CheckpointError(
            f"resuming with {given} would change what the run computes (the checkpoint trained with {was}); "
            f"{keep}, or pass {allow}"
        )
    return [_note(name, *changed[name], name in safe) for name in changed]


def _same(name: str, old, new) -> bool:
    """Equal values; directories also when spelled differently (relative, absolute) but naming the same place."""
    if old == new:
        return True
    return name in ("checkpoint_dir", "log_dir") and bool(old and new) and Path(old).resolve() == Path(new).resolve()


def _note(name: str, old, new, safe: bool) -> str:
    if name == "schedule_steps" and safe:
        why = f" (the schedule keeps its {new} steps; the steps after it run at its final learning rate)"
    else:
        why = "" if safe else " (allowed by --allow-config-change: the run now differs from an uninterrupted one)"
    return f"{name}: {old!r} -> {new!r}{why}"


def resume_config(overrides: dict) -> tuple[TrainConfig, list[str], int, dict]:
    """The config that continues ``overrides['resume_from']``: the checkpoint's own, plus ``overrides``.

    ``overrides`` holds only the fields given explicitly (the command line's
    flags).  Without a ``checkpoint_dir`` the run keeps saving next to the
    checkpoint it resumes.  A new ``max_steps`` keeps the schedule's length
    unless ``schedule_steps`` is given too.  Returns ``(config, one line per
    changed field, the checkpoint's step, its saved progress)``.
    """
    path, step, saved, progress = stored_run(overrides["resume_from"])
    if not saved:
        raise CheckpointError(
            f"checkpoint {str(path)!r} holds no training config (written by a custom training script); "
            "resume it from that script"
        )
    known = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(saved) - known)
    if unknown:
        raise CheckpointError(
            f"checkpoint {str(path)!r} has settings this gputrain does not know ({', '.join(unknown)}); "
            "resume with the gputrain that wrote it"
        )
    _refuse_another_runs_log(path, saved, overrides)
    base = {k: v for k, v in saved.items() if k not in PER_INVOCATION}
    base.setdefault("schedule_steps", 0)
    if "checkpoint_dir" not in overrides:
        base["checkpoint_dir"] = str(path.parent)  # keep saving where the run saved (even if it moved)
    moved = overrides.get("max_steps", saved["max_steps"]) != saved["max_steps"]
    if moved and "schedule_steps" not in overrides and not base["schedule_steps"]:
        base["schedule_steps"] = saved["max_steps"]  # extending (or shortening) a run keeps its schedule
    cfg = TrainConfig(**{**base, **overrides})
    return cfg, check_resume(cfg, saved, path, flags=True), step, progress


def _refuse_another_runs_log(path: Path, saved: dict, overrides: dict) -> None:
    """A checkpoint copied (or moved) away from the run that wrote it must not write into that run's log.

    The copy keeps saving next to itself, but its stored ``log_dir`` still
    names the original run's: the resume would rewrite that run's
    metrics.csv.  Such a resume needs ``--log-dir``, which says where this
    run's log goes (the old one only if the user names it).
    """
    written, log = saved.get("checkpoint_dir"), saved.get("log_dir")
    if "log_dir" in overrides or not log or not written or _same("checkpoint_dir", written, str(path.parent)):
        return
    raise CheckpointError(
        f"checkpoint {str(path)!r} was written in checkpoint_dir={written!r}, and that run logs to "
        f"{str(Path(log) / 'metrics.csv')!r}: resuming this copy would rewrite that run's log; "
        f"pass --log-dir DIR for this run's own log (--log-dir {log} only if this copy continues that run)"
    )


def finished(cfg: TrainConfig, step: int, progress: dict) -> Optional[str]:
    """Why a run resumed at ``step`` has nothing left to do (``None`` when it has)."""
    if step >= cfg.max_steps:
        return f"at step {step} of {cfg.max_steps}: the run is finished (raise --max-steps to train further)"
    if cfg.patience and progress.get("best_step") and progress.get("evals_since_best", 0) >= cfg.patience:
        return (
            f"at step {step}: the run stopped early (no better validation loss for {cfg.patience} evaluations; "
            "raise --patience to train further)"
        )
    return None

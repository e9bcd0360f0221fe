"""``gputrain sft``: supervised fine-tuning of a checkpoint on chat examples (JSONL), full or LoRA (chapter 12)."""

from __future__ import annotations

from .flags import TRAIN_CONFIG, _add_config_flags, _finite_float, _given, _rank_zero
from .train import run_and_report

# The TrainConfig fields that mean something to fine-tuning: the model's shape comes from --from,
# its data from --data, so neither section is offered (val_fraction and seed are)
SFT_FIELDS = (
    "val_fraction", "seed", "batch_size", "grad_accum_steps", "max_steps", "optimizer", "lr", "beta1", "beta2",
    "schedule", "warmup_steps", "min_lr_ratio", "decay_fraction", "schedule_steps", "weight_decay", "grad_clip",
    "mixed_precision", "compile", "activation_checkpointing", "eval_interval", "eval_batches", "patience",
    "spike_window", "spike_threshold", "skip_spikes", "max_bad_steps", "checkpoint_dir", "checkpoint_interval",
    "keep_checkpoints", "resume_from", "allow_config_change", "log_dir", "tensorboard", "progress",
)  # fmt: skip


def _sft_default(name: str) -> str:
    """The default a fine-tuning flag shows in --help: fine-tuning's own where it differs from pretraining's."""
    from ..posttrain import LORA_LR, SFT_DEFAULTS
    from ..train import TrainConfig

    if name == "lr":
        return f"default: {SFT_DEFAULTS['lr']}, with LoRA {LORA_LR}"
    return f"default: {SFT_DEFAULTS.get(name, TrainConfig.__dataclass_fields__[name].default)}"


def _check_sft_flags(args, overrides: dict, examples: str = "chat examples") -> None:
    """Everything that can be refused before torch loads: the flags' numbers and what a resume may not change."""
    from ..bounds import check_fields

    check_fields(overrides)
    if overrides.get("resume_from"):
        given = [f for f, v in (("--from", args.base), ("--data", args.data), ("--lora-rank", args.lora_rank)) if v]
        if given:
            raise ValueError(
                f"{', '.join(given)}: a resumed run keeps the base, data and adapters its checkpoint "
                "records; leave them out with --resume-from"
            )
        return
    missing = [f for f, v in (("--from CKPT", args.base), ("--data FILE.jsonl", args.data)) if v is None]
    if missing:
        raise ValueError(f"give {' and '.join(missing)} of {examples} (or --resume-from DIR to continue a run)")
    if args.lora_rank is not None and args.lora_rank <= 0:
        raise ValueError(f"--lora-rank must be >= 1, got {args.lora_rank}; leave it out for full fine-tuning")
    if args.lora_alpha is not None and args.lora_alpha <= 0:
        raise ValueError(f"--lora-alpha must be > 0, got {args.lora_alpha}; the usual choice is 2r")
    if args.lora_alpha is not None and args.lora_rank is None:
        raise ValueError("--lora-alpha needs --lora-rank (LoRA's scale is alpha / rank)")


def _tuning_overrides(args) -> dict:
    """The TrainConfig fields a tuning command (sft, dpo, rl) was given; ``--quiet`` also turns progress off."""
    overrides = {k: v for k, v in _given(args, TRAIN_CONFIG).items() if k in SFT_FIELDS}  # --data is ours
    if args.quiet and "progress" not in overrides:
        overrides["progress"] = False
    return overrides


def _lora_settings(args) -> dict:
    """``--lora-rank``, ``--lora-alpha`` and ``--lora-targets`` as the keywords finetune, prefer and reinforce take."""
    lora = {"lora_rank": args.lora_rank or 0, "lora_alpha": args.lora_alpha or 0.0}
    if args.lora_targets:
        lora["lora_targets"] = tuple(t.strip() for t in args.lora_targets.split(",") if t.strip())
    return lora


def _report_tuning(command: str, args, run, overrides: dict) -> int:
    """Run a tuning command's ``run()`` and turn how it ended into lines and the exit code, as train does."""
    quiet = args.quiet or not _rank_zero()
    return run_and_report(command, run, overrides.get("checkpoint_dir", ""), quiet)


def _cmd_sft(args) -> int:
    overrides = _tuning_overrides(args)
    _check_sft_flags(args, overrides)
    from ..posttrain import finetune

    lora = _lora_settings(args)
    return _report_tuning("sft", args, lambda: finetune(args.base, args.data, **lora, **overrides), overrides)


def _add_sft(sub) -> None:
    p = sub.add_parser(
        "sft",
        help="fine-tune a checkpoint on chat examples (full or LoRA)",
        description="Supervised fine-tuning on the training loop of gputrain train: the base checkpoint gets the "
        "chat format's reserved tokens, the loss counts only the assistant's tokens. Each line of --data is "
        '{"messages": [{"role": "system"|"user"|"assistant", "content": ...}, ...]} or {"prompt": ..., '
        '"response": ...}. A bad line is one error naming its file and line, and nothing is written. '
        "--resume-from, Ctrl-C and SIGTERM behave as in gputrain train.",
    )
    p.add_argument("--from", dest="base", default=None, metavar="CKPT", help="the pretrained checkpoint to fine-tune")
    p.add_argument("--data", default=None, metavar="FILE.jsonl", help="chat examples, one JSON record per line")
    _add_tuning_flags(p, _sft_default, _cmd_sft)


def _add_tuning_flags(p, defaults, func) -> None:
    """What sft, dpo and rl share after their own flags: LoRA, --quiet, the TrainConfig fields, the command."""
    p.add_argument("--lora-rank", type=int, default=None, metavar="R", help="train LoRA adapters of rank R only")
    p.add_argument("--lora-alpha", type=_finite_float, default=None, metavar="A", help="LoRA's alpha (default: 2R)")
    p.add_argument(
        "--lora-targets",
        default=None,
        metavar="NAMES",
        help="comma-separated linear layers to adapt (default: attn.qkv,attn.proj,mlp.fc,mlp.proj)",
    )
    p.add_argument("--quiet", action="store_true", help="print nothing at the end (and no progress bar)")
    _add_config_flags(p, TRAIN_CONFIG, defaults=defaults, only=SFT_FIELDS)
    p.set_defaults(func=func)

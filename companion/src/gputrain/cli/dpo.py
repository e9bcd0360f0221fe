"""``gputrain dpo``: direct preference optimisation of a checkpoint on prompt/chosen/rejected pairs (chapter 13)."""

from __future__ import annotations

from .flags import _finite_float
from .sft import _add_tuning_flags, _check_sft_flags, _lora_settings, _report_tuning, _tuning_overrides


def _dpo_default(name: str) -> str:
    """The default a DPO flag shows in --help: DPO's own where it differs from pretraining's."""
    from ..posttrain.preference import DPO_DEFAULTS
    from ..train import TrainConfig

    return f"default: {DPO_DEFAULTS.get(name, TrainConfig.__dataclass_fields__[name].default)}"


def _cmd_dpo(args) -> int:
    overrides = _tuning_overrides(args)
    _check_sft_flags(args, overrides, "preference pairs")
    if args.beta is not None and (args.beta <= 0 or overrides.get("resume_from")):
        raise ValueError(
            f"--beta must be > 0, got {args.beta}"
            if args.beta <= 0
            else "--beta: a resumed DPO run keeps the beta its checkpoint records; leave it out with --resume-from"
        )
    from ..posttrain import DPO_BETA
    from ..posttrain.preference import prefer

    lora = _lora_settings(args)
    beta = {} if overrides.get("resume_from") else {"beta": DPO_BETA if args.beta is None else args.beta}
    return _report_tuning("dpo", args, lambda: prefer(args.base, args.data, **beta, **lora, **overrides), overrides)


def _add_dpo(sub) -> None:
    p = sub.add_parser(
        "dpo",
        help="tune a checkpoint on preference pairs (DPO)",
        description="Direct preference optimisation on the training loop of gputrain train: the policy starts "
        "as --from and a frozen copy of it is the reference. Each line of --data is "
        '{"prompt": ..., "chosen": ..., "rejected": ...}. A bad line is one error naming its file and line, and '
        "nothing is written. --resume-from, Ctrl-C and SIGTERM behave as in gputrain train.",
    )
    p.add_argument("--from", dest="base", default=None, metavar="CKPT", help="the checkpoint to tune (usually SFT)")
    p.add_argument("--data", default=None, metavar="FILE.jsonl", help="preference pairs, one JSON record per line")
    p.add_argument("--beta", type=_finite_float, default=None, help="DPO's beta, the pull to the reference (0.1)")
    _add_tuning_flags(p, _dpo_default, _cmd_dpo)

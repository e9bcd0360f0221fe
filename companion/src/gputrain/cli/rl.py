"""``gputrain rl``: GRPO from a checkpoint on a task's train problems, graded exactly (chapter 13)."""

from __future__ import annotations

from .flags import RL_SETTINGS, _add_config_flags, _given
from .sft import _add_tuning_flags, _lora_settings, _report_tuning, _tuning_overrides


def _rl_default(name: str) -> str:
    """The default an RL flag shows in --help: RL's own where it differs from pretraining's."""
    from ..posttrain.rl import RL_DEFAULTS
    from ..train import TrainConfig

    return f"default: {RL_DEFAULTS.get(name, TrainConfig.__dataclass_fields__[name].default)}"


def _cmd_rl(args) -> int:
    overrides = _tuning_overrides(args)
    settings = _given(args, RL_SETTINGS)
    from ..bounds import check_fields

    check_fields(overrides)
    if overrides.get("resume_from"):
        given = [f"--{k.replace('_', '-')}" for k in settings] + (["--from"] if args.base else [])
        if given:
            raise ValueError(
                f"{', '.join(given)}: a resumed RL run keeps the base and the settings its checkpoint records; "
                "leave them out with --resume-from"
            )
    elif args.base is None:
        raise ValueError("give --from CKPT (usually a checkpoint gputrain sft wrote), or --resume-from DIR")
    from ..posttrain.rl import GRPOSettings, reinforce

    rl = {} if overrides.get("resume_from") else {"settings": GRPOSettings(**settings)}
    if not overrides.get("resume_from"):
        rl["settings"].check()  # before torch does anything else: one line
    lora = _lora_settings(args)
    done = []
    rc = _report_tuning("rl", args, lambda: _kept(done, reinforce(args.base, **rl, **lora, **overrides)), overrides)
    if done and not args.quiet:
        print(_rewards_line(done[0].model.history))
    return rc


def _kept(box: list, result):
    box.append(result)
    return result


def _rewards_line(history: list) -> str:
    """What the loop's summary cannot say for RL (its "tokens" are problems): the reward's move, the sampled tokens."""
    if not history:
        return "rl: no step ran"
    n = max(1, len(history) // 10)
    first, last = (sum(h["reward"] for h in part) / len(part) for part in (history[:n], history[-n:]))
    sampled = sum(h["tokens"] for h in history if h["fresh"])
    seconds = sum(h["rollout_seconds"] for h in history)
    return (
        f"rl: mean reward {first:.3f} -> {last:.3f} (first and last {n} steps); {sampled:,} sampled tokens, "
        f"{sampled / max(seconds, 1e-9):,.0f}/s while sampling; held-out accuracy: gputrain eval --task"
    )


def _add_rl(sub) -> None:
    p = sub.add_parser(
        "rl",
        help="reinforcement learning (GRPO, RLOO or PPO) on a task's problems, graded exactly or by your reward",
        description="RL on the training loop of gputrain train: each step samples --group-size replies to "
        "--batch-size train problems with the KV cache, grades them (the task's exact grader, or --reward "
        "module:function, called as TRL calls a reward function), and takes a step of --algo's loss: grpo "
        "(TRL's GRPO family: --loss-type, --scale-rewards, --beta with the k3 KL to a frozen reference), rloo "
        "(TRL's RLOO) or ppo (a value model, per-token KL-penalised rewards, GAE, PPO-clip). --num-iterations "
        "reuses a rollout for several clipped steps. The loss is not the progress signal: score the result "
        "with gputrain eval --task. --resume-from, Ctrl-C and SIGTERM behave as in gputrain train.",
    )
    p.add_argument("--from", dest="base", default=None, metavar="CKPT", help="the checkpoint to start from")
    _add_config_flags(p, RL_SETTINGS)
    _add_tuning_flags(p, _rl_default, _cmd_rl)

"""``gputrain train``: every TrainConfig field a flag, checked before torch loads; a resume, an interrupt."""

from __future__ import annotations

import os
import signal
import sys

from .. import cli_spec as spec
from .flags import TRAIN_CONFIG, _add_config_flags, _Given, _given, _names, _rank_zero


def _check_train_flags(args, overrides: dict) -> None:
    """TrainConfig's number rules on the flags, before torch loads, so that a bad value is answered at once.

    The tiny preset is TrainConfig's defaults, read from the source; the other presets and a resume
    fill in their values later, and TrainConfig checks the whole again then.
    """
    from ..bounds import check_fields, check_together

    check_fields(overrides)
    if args.preset == "tiny" and not overrides.get("resume_from"):
        check_together({**{f.name: f.default for f in spec.config_fields(*TRAIN_CONFIG)}, **overrides})


def _cmd_train(args) -> int:
    overrides = _given(args, TRAIN_CONFIG)
    _check_train_flags(args, overrides)
    from ..train import preset_config, train
    from ..train.resume import finished, resume_config

    say = print if _rank_zero() and not args.quiet else (lambda *a, **k: None)
    if args.quiet and "progress" not in overrides:
        overrides["progress"] = False
    launcher_precision = os.environ.get("ACCELERATE_MIXED_PRECISION")  # set by accelerate launch --mixed_precision
    if overrides.get("resume_from"):  # the run's settings come from its checkpoint; flags change only what is safe
        if args.preset_given:
            say(f"--preset {args.preset}: ignored, a resumed run keeps the settings its checkpoint holds")
        cfg, notes, step, progress = resume_config(overrides)
        done = finished(cfg, step, progress)
        if done:
            say(f"nothing to do: checkpoint {args.resume_from!r} is {done}")
            return 0
        if launcher_precision and "mixed_precision" not in overrides and launcher_precision != cfg.mixed_precision:
            say(f"mixed_precision: keeping the checkpoint's {cfg.mixed_precision!r} (the launcher asks for "
                f"{launcher_precision!r}; pass --mixed-precision to change it)")  # fmt: skip
        for note in notes:
            say(note)
    else:
        if "mixed_precision" not in overrides and launcher_precision:
            overrides["mixed_precision"] = launcher_precision  # the launcher's choice, unless the flag says otherwise
        cfg = preset_config(args.preset, **overrides)  # validates: ValueError on a bad field
    if cfg.optimizer == "muon" and "beta1" in overrides:  # Muon's own momentum is not a flag
        say(f"--beta1 {cfg.beta1}: Muon's momentum stays 0.95; beta1 is the first beta of its AdamW part only")
    # with progress on, it prints its own data and summary lines on the main process
    notice = None if args.quiet or not _rank_zero() else print
    return run_and_report("train", lambda: train(cfg, data_notice=notice), cfg.checkpoint_dir, args.quiet)


def run_and_report(command: str, run, checkpoint_dir: str, quiet: bool) -> int:
    """Run a training ``run()`` (train, sft) and turn how it ended into the exit code and its lines.

    0: finished; 1: the run went wrong (diverged, a checkpoint could not be written); 130: a second
    Ctrl-C stopped it at once; 128 + the signal: Ctrl-C or SIGTERM ended it with a checkpoint.
    """
    from ..train import TrainingDiverged, summary_line
    from ..train.checkpoint import SaveError, list_checkpoints
    from ..train.progress import interrupt_line

    try:
        result = run()
    except (TrainingDiverged, SaveError) as exc:  # not a usage error: the run itself went wrong
        print(f"gputrain {command}: stopped: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:  # a second Ctrl-C (or one before the first step)
        kept = list_checkpoints(checkpoint_dir) if checkpoint_dir else []
        where = f"the last checkpoint is {str(kept[-1])!r}" if kept else "no checkpoint was written"
        print(f"gputrain {command}: stopped at once ({exc or 'interrupted'}); {where}", file=sys.stderr)
        return 130
    cfg = result.config
    if result.interrupted:  # one line naming the checkpoint (train() printed it already when progress is on)
        if result.is_main_process and not cfg.progress:
            print(f"gputrain {command}: {interrupt_line(result)}", file=sys.stderr)
        return 128 + signal.Signals[result.interrupted].value
    if not (quiet or cfg.progress) and result.is_main_process:
        if result.resumed_step:
            print(f"Resumed from step {result.resumed_step} of {cfg.max_steps}")
        print(summary_line(result))
    return 0


def _add_train(sub) -> None:
    p_train = sub.add_parser(
        "train",
        help="train a GPT on the offline corpus",
        description="Train a GPT on the offline corpus. Every TrainConfig field is a flag. "
        "With --resume-from the run continues with the settings its checkpoint holds: a flag may change "
        "how it is watched and saved (more --max-steps, another --log-dir, the eval cadence); a change of "
        "what it computes (data, batch, learning rate ...) needs --allow-config-change. A larger --max-steps "
        "keeps the checkpoint's schedule (it sets --schedule-steps to the old length: the extra steps run at "
        "the schedule's final rate); pass --schedule-steps N --allow-config-change to stretch it instead. "
        "Ctrl-C or SIGTERM stops after the current step and saves a checkpoint; a second Ctrl-C stops at once.",
    )
    p_train.add_argument(
        "--preset",
        choices=_names("gputrain.train.config", "PRESETS"),
        default="tiny",
        action=_Given,
        help="starting configuration (default: %(default)s, whose fields are the defaults shown below); "
        "the flags below override its fields (not used with --resume-from)",
    )
    p_train.add_argument("--quiet", action="store_true", help="print nothing at the end (and no progress bar)")
    p_train.set_defaults(preset_given=False)
    _add_config_flags(p_train, TRAIN_CONFIG)
    p_train.set_defaults(func=_cmd_train)

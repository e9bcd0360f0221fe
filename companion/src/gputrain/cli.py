"""Command line: ``gputrain info | train | memory``; also ``python -m gputrain``.

Bad input never gets a traceback: one line on stderr naming the fix, exit
code 2, and nothing written.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
import sys
from typing import Optional, Sequence

EXIT_USAGE = 2


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the fix (exit code 2), not a usage dump."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _attach_negative_numbers(argv: Sequence[str]) -> list[str]:
    """``--lr -3e-4`` -> ``--lr=-3e-4``: argparse would read ``-3e-4`` as a flag."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and re.fullmatch(r"-[\d.][\d.eE+-]*", arg):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def _field_help(cls) -> dict[str, str]:
    """The one-line comment after each dataclass field, used as the flag's help."""
    pattern = re.compile(r"^\s+(\w+):[^#\n]*#\s*(.+)$", re.M)
    return dict(pattern.findall(inspect.getsource(cls)))


def _add_config_flags(parser: argparse.ArgumentParser, cls) -> None:
    helps = _field_help(cls)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        kind = type(f.default)
        help_text = f"{helps.get(f.name, '')} (default: {f.default})"
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        else:
            parser.add_argument(flag, type=kind, default=None, metavar=kind.__name__.upper(), help=help_text)


def _cmd_info(args) -> int:
    from .device import info

    data = info()
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        width = max(len(k) for k in data)
        for key, value in data.items():
            print(f"{key:<{width}}  {'unknown' if value is None else value}")
    return 0


def _cmd_train(args) -> int:
    from .train import TrainConfig, TrainingDiverged, preset_config, train

    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)
                 if getattr(args, f.name) is not None}
    cfg = preset_config(args.preset, **overrides)  # validates: ValueError on a bad field
    try:
        train(cfg)  # prints its own summary line on the main process
    except TrainingDiverged as exc:  # not a usage error: the run itself went wrong
        print(f"gputrain train: stopped: {exc}", file=sys.stderr)
        return 1
    return 0


def _cmd_memory(args) -> int:
    from .memory import GPT2_SMALL, GPT3_175B, estimate

    shapes = {"gpt2-small": GPT2_SMALL, "gpt3-175b": GPT3_175B}
    if args.model is not None and args.params is not None:
        raise ValueError("give either --params or --model, not both")
    model = shapes[args.model] if args.model else (args.params if args.params is not None else 175e9)
    e = estimate(model, batch_size=args.batch_size, seq_len=args.seq_len, precision=args.precision,
                 optimizer=args.optimizer, activation_checkpointing=args.checkpointing,
                 zero_stage=args.zero_stage, dp=args.dp, activation_model=args.activation_model)
    if args.json:
        print(json.dumps({"settings": e.settings, "bytes": e.as_dict()}, indent=2))
    else:
        print(f"{e.settings['params']:.4g} parameters, {e.settings['precision']}, {args.optimizer}, "
              f"ZeRO stage {args.zero_stage} over {args.dp} GPU(s); bytes per GPU:")
        print(e.table())
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .train import TrainConfig

    parser = OneLineParser(
        prog="gputrain",
        description="Companion of 'How a GPU Trains AI': inspect the machine, train a GPT.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=OneLineParser)

    p_info = sub.add_parser("info", help="versions, device, preset and known peak FLOP/s")
    p_info.add_argument("--json", action="store_true", help="print as JSON")
    p_info.set_defaults(func=_cmd_info)

    p_mem = sub.add_parser("memory", help="bytes per GPU of training a model (chapter 7)",
                           description="Estimate parameters, gradients, master weights, optimizer states "
                                       "and activations per GPU.")
    p_mem.add_argument("--params", type=float, default=None, help="parameter count, e.g. 175e9 (default)")
    p_mem.add_argument("--model", choices=["gpt2-small", "gpt3-175b"], default=None,
                       help="a known shape instead of --params (adds activations)")
    p_mem.add_argument("--batch-size", type=int, default=1, help="micro-batch per GPU (default: 1)")
    p_mem.add_argument("--seq-len", type=int, default=None, help="tokens per sequence (default: the context)")
    p_mem.add_argument("--precision", default="bf16-mixed",
                       help="recipe: fp32, tf32, bf16-mixed, fp16-mixed, bf16-autocast, bf16-pure, ...")
    p_mem.add_argument("--optimizer", default="adam", help="adam, adamw, sgd, momentum, ... (default: adam)")
    p_mem.add_argument("--checkpointing", action="store_true", help="activation checkpointing")
    p_mem.add_argument("--zero-stage", type=int, default=0, help="ZeRO stage 0-3 (default: 0)")
    p_mem.add_argument("--dp", type=int, default=1, help="data-parallel degree (default: 1)")
    p_mem.add_argument("--activation-model", choices=["gputrain", "korthikanti"], default="korthikanti",
                       help="our GPT's saved tensors or Korthikanti et al.'s formula (default)")
    p_mem.add_argument("--json", action="store_true", help="print as JSON")
    p_mem.set_defaults(func=_cmd_memory)

    p_train = sub.add_parser("train", help="train a GPT on the offline corpus",
                             description="Train a GPT on the offline corpus. Every TrainConfig field is a flag.")
    from .train import PRESETS

    p_train.add_argument("--preset", choices=list(PRESETS), default="tiny",
                         help="starting configuration; the flags below override its fields")
    _add_config_flags(p_train, TrainConfig)
    p_train.set_defaults(func=_cmd_train)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(_attach_negative_numbers(sys.argv[1:] if argv is None else argv))
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"gputrain {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    raise SystemExit(main())

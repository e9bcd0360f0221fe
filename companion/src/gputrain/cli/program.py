"""The ``gputrain`` program: the parser with every command, and :func:`main`, which runs one."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from .. import __version__
from .bench import _add_bench
from .dpo import _add_dpo
from .eval import _add_eval
from .flags import EXIT_USAGE, OneLineParser, _attach_negative_numbers
from .info import _add_info
from .memory import _add_memory
from .plot import _add_plot
from .sample import _add_sample
from .scale import _add_scale
from .sft import _add_sft
from .train import _add_train


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="gputrain",
        description="Companion of 'How a GPU Trains AI': inspect the machine, train a GPT, sample and evaluate it.",
    )
    parser.add_argument("--version", action="version", version=f"gputrain {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=OneLineParser)

    _add_info(sub)
    _add_memory(sub)
    _add_train(sub)
    _add_sft(sub)
    _add_dpo(sub)
    _add_sample(sub)
    _add_eval(sub)
    _add_plot(sub)
    _add_bench(sub)
    _add_scale(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(_attach_negative_numbers(sys.argv[1:] if argv is None else argv))
    try:
        code = args.func(args)
        sys.stdout.flush()  # inside the try: a reader that has gone is found here, not at exit
        return code
    except (ValueError, FileNotFoundError) as exc:  # a CheckpointError is a ValueError
        print(f"gputrain {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # `gputrain memory ... | head -1`: the reader has had enough, which is no error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # what is still buffered goes nowhere
        return 0

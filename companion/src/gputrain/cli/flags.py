"""What every command's parser shares: one-line errors, finite floats, negative numbers, a dataclass's fields as flags.

Nothing here imports torch: :mod:`gputrain.cli_spec` reads the dataclasses and tables from the source.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from typing import Callable, Optional, Sequence

from .. import cli_spec as spec

EXIT_USAGE = 2


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the fix (exit code 2), not a usage dump."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _Given(argparse.Action):
    """Store the value and remember that the flag was given (``--preset`` means nothing to a resume)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.preset_given = True


def _finite_float(text: str) -> float:
    """argparse's ``type`` for every float flag: ``nan`` and ``inf`` parse as floats but mean nothing here."""
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _attach_negative_numbers(argv: Sequence[str]) -> list[str]:
    """``--lr -3e-4`` -> ``--lr=-3e-4``: argparse would read ``-3e-4`` as a flag."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and re.fullmatch(r"-[\d.][\d.eE+-]*", arg):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


# the dataclasses whose fields are flags, and the tables whose names a flag offers: (module, name)
TRAIN_CONFIG = ("gputrain.train.config", "TrainConfig")
LADDER_CONFIG = ("gputrain.bench.config", "LadderConfig")
RL_SETTINGS = ("gputrain.posttrain.rlsettings", "GRPOSettings")
CHOICES = {
    "optimizer": ("gputrain.train.components", "OPTIMIZERS"),
    "schedule": ("gputrain.train.components", "SCHEDULES"),
    "mixed_precision": ("gputrain.train.components", "MIXED_PRECISION"),
    "compile_scope": ("gputrain.bench.config", "COMPILE_SCOPES"),
    "router": ("gputrain.moe", "ROUTERS"),
    "balance": ("gputrain.moe", "BALANCES"),
    "loss_type": ("gputrain.posttrain.grpo", "LOSS_TYPES"),
    "scale_rewards": ("gputrain.posttrain.grpo", "SCALE_REWARDS"),
    "algo": ("gputrain.posttrain.rlalgos", "ALGOS"),  # gputrain rl --algo (chapter 13)
    "task": ("gputrain.posttrain.tasks", "TASKS"),  # gputrain eval --task (chapter 12)
}


def _names(module: str, table: str) -> list[str]:
    return spec.table_names(module, table)


class _LazyText:
    """Help text computed when ``--help`` prints it (argparse formats help with ``%``), not when the parser is built."""

    def __init__(self, compute, name: str):
        self.compute, self.name = compute, name

    def __str__(self) -> str:
        return self.compute(self.name)


def _add_config_flags(
    parser: argparse.ArgumentParser,
    config: tuple[str, str],
    defaults: Optional[Callable[[str], str]] = None,
    only: Optional[Sequence[str]] = None,
) -> None:
    """One flag per field of the dataclass ``config``, grouped under the comment lines that open its sections.

    ``defaults`` (field name -> text) replaces the dataclass default in the help; it runs only for ``--help``,
    so building the parser imports nothing heavy.  ``only``: the fields to offer (default: all).
    """
    groups: dict[Optional[str], object] = {}
    for f in spec.config_fields(*config):
        if only is not None and f.name not in only:
            continue
        if f.section not in groups:
            title, _, about = (f.section or "").partition(": ")
            groups[f.section] = parser.add_argument_group(title, about or None) if f.section else parser
        group = groups[f.section]
        flag = "--" + f.name.replace("_", "-")
        help_text = f"{f.help} ({'%(preset_default)s' if defaults else f'default: {f.default}'})"
        if f.kind is bool:
            action = group.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif f.name in CHOICES:
            abouts = spec.table_abouts(*CHOICES[f.name])  # each name's own text, so the list cannot go stale
            if abouts:
                listed = "; ".join(f"{name}: {about}" for name, about in abouts.items()).replace("%", "%%")
                help_text = f"{help_text}. {listed}"
            action = group.add_argument(flag, choices=_names(*CHOICES[f.name]), default=None, help=help_text)
        else:
            kind = _finite_float if f.kind is float else f.kind
            action = group.add_argument(flag, type=kind, default=None, metavar=f.kind.__name__.upper(), help=help_text)
        if defaults:
            action.preset_default = _LazyText(defaults, f.name)


def _given(args, config: tuple[str, str]) -> dict:
    """The fields of ``config`` given on the command line (flags left out are None, fields not offered absent)."""
    fields = spec.config_fields(*config)
    return {f.name: getattr(args, f.name) for f in fields if getattr(args, f.name, None) is not None}


def _rank_zero() -> bool:
    """Whether this process prints the run's lines (under accelerate launch / torchrun only rank 0 does)."""
    return os.environ.get("RANK", "0") == "0"

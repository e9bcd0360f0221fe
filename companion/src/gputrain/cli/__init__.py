"""Command line: ``gputrain info | train | sft | dpo | sample | eval | plot | memory | bench | scale``;
also ``python -m gputrain``.

Bad input never gets a traceback: one line on stderr naming the fix, exit
code 2, and nothing written.  The parser is built without importing torch
(:mod:`gputrain.cli_spec` reads the flags from the source), so a typo is
answered at once; each command imports what it runs, inside the function
that runs it.

One command per module, each holding its parser (``_add_<command>``) and
what it runs (``_cmd_<command>``).  Imports go one way, down this list: a
module may import those above it, never one below::

    flags     OneLineParser, finite floats, a dataclass's fields as flags  (imports gputrain.cli_spec)
       |
    info      gputrain info
    memory    gputrain memory and the sizes it answers for
    train     gputrain train: flags checked before torch, a resume          (imports gputrain.cli_spec)
    sft       gputrain sft: fine-tuning on chat examples, full or LoRA      (imports train)
    dpo       gputrain dpo: preference pairs, policy and frozen reference   (imports sft, train)
    sample    gputrain sample: streamed bytes after a prompt, or a chat reply
    eval      gputrain eval: loss, perplexity, bits per byte; a task's accuracy and pass@k
    plot      gputrain plot: a run's metrics.csv drawn
    bench     gputrain bench: the speed ladder and the loop's overhead
    scale     gputrain scale: compute-optimal N and D, loss and GPU time for a budget
       |
    program   build_parser() with every command, and main()

Every name is re-exported here, so ``from gputrain.cli import main`` (the
console script) works as it always did.
"""

from .flags import (
    CHOICES,
    EXIT_USAGE,
    LADDER_CONFIG,
    TRAIN_CONFIG,
    OneLineParser,
    _attach_negative_numbers,  # noqa: F401 (tests parse the book's commands as main does)
)
from .memory import MEMORY_BOUNDS
from .program import build_parser, main
from .sample import SAMPLE_SEPARATOR
from .sft import SFT_FIELDS
from .train import run_and_report

__all__ = [
    "CHOICES",
    "EXIT_USAGE",
    "LADDER_CONFIG",
    "MEMORY_BOUNDS",
    "SAMPLE_SEPARATOR",
    "SFT_FIELDS",
    "TRAIN_CONFIG",
    "OneLineParser",
    "build_parser",
    "main",
    "run_and_report",
]

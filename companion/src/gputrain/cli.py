"""Command line: ``gputrain info | train | sample | eval | plot | memory | bench``; also ``python -m gputrain``.

Bad input never gets a traceback: one line on stderr naming the fix, exit
code 2, and nothing written.  The parser is built without importing torch
(:mod:`gputrain.cli_spec` reads the flags from the source), so a typo is
answered at once; each command imports what it runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

from . import __version__
from . import cli_spec as spec

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
CHOICES = {
    "optimizer": ("gputrain.train.components", "OPTIMIZERS"),
    "schedule": ("gputrain.train.components", "SCHEDULES"),
    "mixed_precision": ("gputrain.train.components", "MIXED_PRECISION"),
    "compile_scope": ("gputrain.bench.config", "COMPILE_SCOPES"),
    "router": ("gputrain.moe", "ROUTERS"),
    "balance": ("gputrain.moe", "BALANCES"),
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
    parser: argparse.ArgumentParser, config: tuple[str, str], defaults: Optional[Callable[[str], str]] = None
) -> None:
    """One flag per field of the dataclass ``config``, grouped under the comment lines that open its sections.

    ``defaults`` (field name -> text) replaces the dataclass default in the help; it runs only for ``--help``,
    so building the parser imports nothing heavy.
    """
    groups: dict[Optional[str], object] = {}
    for f in spec.config_fields(*config):
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
    """The fields of ``config`` given on the command line (flags left out are None)."""
    return {f.name: getattr(args, f.name) for f in spec.config_fields(*config) if getattr(args, f.name) is not None}


def _rank_zero() -> bool:
    """Whether this process prints the run's lines (under accelerate launch / torchrun only rank 0 does)."""
    return os.environ.get("RANK", "0") == "0"


def _cmd_info(args) -> int:
    from .device import info
    from .fp8 import fast_scaled_mm
    from .speed import native_bf16

    data = info()
    bf16 = native_bf16()  # measured once: a CPU without AVX-512 BF16/AMX runs bf16 products in software
    data["bf16_native"], data["bf16"] = bf16.native, bf16.reason
    fp8 = fast_scaled_mm()  # measured once: some CPUs run tensorwise FP8 products 2,500x slower than FP32
    data["fp8_scaled_mm_fast"], data["fp8_scaled_mm"] = fp8.fast, fp8.reason
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        width = max(len(k) for k in data)
        for key, value in data.items():
            print(f"{key:<{width}}  {'unknown' if value is None else value}")
    return 0


def _check_train_flags(args, overrides: dict) -> None:
    """TrainConfig's number rules on the flags, before torch loads, so that a bad value is answered at once.

    The tiny preset is TrainConfig's defaults, read from the source; the other presets and a resume
    fill in their values later, and TrainConfig checks the whole again then.
    """
    from .bounds import check_fields, check_together

    check_fields(overrides)
    if args.preset == "tiny" and not overrides.get("resume_from"):
        check_together({**{f.name: f.default for f in spec.config_fields(*TRAIN_CONFIG)}, **overrides})


def _cmd_train(args) -> int:
    overrides = _given(args, TRAIN_CONFIG)
    _check_train_flags(args, overrides)
    from .train import TrainingDiverged, preset_config, summary_line, train
    from .train.checkpoint import SaveError, list_checkpoints
    from .train.progress import interrupt_line
    from .train.resume import finished, resume_config

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
    try:
        # with progress on, it prints its own data and summary lines on the main process
        result = train(cfg, data_notice=None if args.quiet or not _rank_zero() else print)
    except (TrainingDiverged, SaveError) as exc:  # not a usage error: the run itself went wrong
        print(f"gputrain train: stopped: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:  # a second Ctrl-C (or one before the first step)
        kept = list_checkpoints(cfg.checkpoint_dir) if cfg.checkpoint_dir else []
        where = f"the last checkpoint is {str(kept[-1])!r}" if kept else "no checkpoint was written"
        print(f"gputrain train: stopped at once ({exc or 'interrupted'}); {where}", file=sys.stderr)
        return 130
    if result.interrupted:  # one line naming the checkpoint (train() printed it already when progress is on)
        if result.is_main_process and not cfg.progress:
            print(f"gputrain train: {interrupt_line(result)}", file=sys.stderr)
        return 128 + signal.Signals[result.interrupted].value
    if not (args.quiet or cfg.progress) and result.is_main_process:
        if result.resumed_step:
            print(f"Resumed from step {result.resumed_step} of {cfg.max_steps}")
        print(summary_line(result))
    return 0


SAMPLE_SEPARATOR = "\n---------------"  # printed between samples, as nanoGPT's sample.py does


def _read_prompt(args) -> str:
    """The prompt from --prompt or --prompt-file (one of them), as text."""
    if args.prompt_file is None:
        return "\n" if args.prompt is None else args.prompt
    if args.prompt is not None:
        raise ValueError("give either --prompt or --prompt-file, not both")
    path = Path(args.prompt_file)
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "not found"
        raise FileNotFoundError(f"--prompt-file {str(path)!r} {what}; pass a text file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"--prompt-file {str(path)!r} is not UTF-8 text; the prompt must be text") from None


def _cmd_sample(args) -> int:
    from .train import stream_samples

    pieces = stream_samples(
        args.checkpoint,
        prompt=_read_prompt(args),
        tokens=args.tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        seed=args.seed,
        num_samples=args.num_samples,
    )
    shown = -1
    try:
        for n, piece in pieces:  # streamed: each byte is printed as soon as it is sampled
            if n != shown and shown >= 0:
                print(SAMPLE_SEPARATOR, flush=True)
            shown = n
            print(piece, end="", flush=True)
        print(flush=True)
    except KeyboardInterrupt:  # Ctrl-C: what was printed stays, and stopping is not an error
        print(flush=True)
    return 0


def _cmd_eval(args) -> int:
    from .train import evaluate_text

    r = evaluate_text(
        args.checkpoint,
        args.data,
        corpus_bytes=args.corpus_bytes,
        max_batches=args.max_batches,
        batch_size=args.batch_size,
    )
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        print(
            f"loss {r['loss']:.4f} nats/byte   perplexity {r['perplexity']:.3f}   "
            f"bits/byte {r['bits_per_byte']:.4f}   ({r['tokens']:,} tokens of {r['data']}: {r['held_out']}; "
            f"{r['batches']}{_more_windows(r)})"
        )
    return 0


def _more_windows(r: dict) -> str:
    """How to score every window that was read, when the evaluation stopped short of them."""
    if r["windows"] == r["windows_in_text"]:
        return ""
    return f"; --max-batches {-(-r['windows_in_text'] // r['batch_size'])} scores them all"


# What `gputrain memory` answers for: from one parameter (or one sequence of one token) up to a thousand
# times today's largest models and batches; past that the bytes overflow a float (inf) or print 300 digits.
MEMORY_BOUNDS = {"--params": (1, 1e15, "7e9"), "--batch-size": (1, 10**7, "8"), "--seq-len": (1, 10**8, "1024")}


def _check_memory_args(args, shapes: dict) -> None:
    """Sizes ``estimate`` would take but cannot mean: outside :data:`MEMORY_BOUNDS`, or beyond the model's context."""
    for flag, value in (("--params", args.params), ("--batch-size", args.batch_size), ("--seq-len", args.seq_len)):
        low, high, example = MEMORY_BOUNDS[flag]
        if value is not None and not (math.isfinite(value) and low <= value <= high):
            raise ValueError(f"{flag} must be between {low:g} and {high:g}, got {value:g}; e.g. {flag} {example}")
    if args.model and args.seq_len is not None and args.seq_len > shapes[args.model].block_size:
        context = shapes[args.model].block_size
        raise ValueError(
            f"--seq-len {args.seq_len} exceeds the context of {args.model} ({context} tokens); "
            f"use --seq-len {context} or less"
        )


def _cmd_memory(args) -> int:
    from .memory import GPT2_SMALL, GPT3_175B, RECIPES, estimate, kv_cache_bytes

    shapes = {"gpt2-small": GPT2_SMALL, "gpt3-175b": GPT3_175B}
    if args.model is not None and args.params is not None:
        raise ValueError("give either --params or --model, not both")
    _check_memory_args(args, shapes)
    model = shapes[args.model] if args.model else (args.params if args.params is not None else 175e9)
    e = estimate(
        model,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        precision=args.precision,
        optimizer=args.optimizer,
        activation_checkpointing=args.checkpointing,
        zero_stage=args.zero_stage,
        dp=args.dp,
        activation_model=args.activation_model,
    )
    generation = None
    if args.model:  # a known shape: the KV cache of generating with it, in the recipe's activation format
        tokens = args.seq_len if args.seq_len is not None else model.block_size
        value = RECIPES[args.precision].activations
        generation = {"kv_cache": kv_cache_bytes(model, tokens, args.batch_size, value), "tokens": tokens}
    if args.json:
        print(json.dumps({"settings": e.settings, "bytes": e.as_dict(), "generation": generation}, indent=2))
    else:
        print(
            f"{e.settings['params']:.4g} parameters, {e.settings['precision']}, {args.optimizer}, "
            f"ZeRO stage {args.zero_stage} over {args.dp} GPU(s); bytes per GPU:"
        )
        print(e.table())
        if generation:
            print(
                f"generating {args.batch_size} x {generation['tokens']:,} tokens, KV cache "
                f"(2 x layers x tokens x width x {value:g} bytes): {generation['kv_cache'] / 1e9:,.3f} GB"
            )
    return 0


def _cmd_plot(args) -> int:
    from .train.runlog import plot_log

    print(f"wrote {plot_log(args.log_dir, args.out)}")
    return 0


def _flag_text(name: str, value) -> str:
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else "--no-" + flag[2:]
    return f"{flag} {value}"


def _check_bench_args(args, out: Optional[str]) -> None:
    """Every bench flag checked before the ladder runs: counts, and the JSON file's folder probed for writing."""
    from .train.rundir import probe_directory, remove_created

    for flag, value in (("--loop-steps", args.loop_steps), ("--loop-rounds", args.loop_rounds)):
        if value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}")
    if out is None:  # a dry run writes nothing
        return
    if Path(out).is_dir():
        raise ValueError(f"--out {out} is a directory; name a JSON file, e.g. --out {Path(out) / 'ladder.json'}")
    remove_created(probe_directory("the folder of --out", Path(out).parent))  # writable? then leave nothing behind


def _cmd_bench(args) -> int:
    from .bench import ladder_config, plan, run_ladder
    from .device import preset
    from .results import read_result, write_result
    from .train.overhead import loop_overhead

    name = args.preset or preset()
    overrides = _given(args, LADDER_CONFIG)
    cfg = ladder_config(name, **overrides)  # validates: ValueError on a bad field
    out = args.out or str(Path(args.out_dir) / f"ladder{'' if name == 'gpu' else '_cpu'}.json")
    _check_bench_args(args, None if args.dry_run else out)
    if args.dry_run:
        print(plan(cfg))
        return 0
    command = " ".join(["gputrain bench", f"--preset {name}", *(_flag_text(k, v) for k, v in overrides.items())])
    result = run_ladder(cfg, out=out, command=command, log=lambda m: print(m, file=sys.stderr, flush=True))
    print(result.table())
    print(
        f"model FLOPs per token 6N + 12LTC = {result.flops_per_token:,} (N = {result.n_params:,}); "
        f"measured peak: {result.peak_measured_source}; wrote {out}"
    )
    if args.loop_overhead if args.loop_overhead is not None else name == "cpu":
        overhead = loop_overhead(
            args.loop_steps, args.loop_rounds, threads=cfg.threads, log=lambda m: print(m, flush=True)
        )
        print(f"gputrain.train / plain PyTorch loop, tokens/s: {overhead['ratio']:.3f}")
        stored = read_result(out)
        keep = ("ratio", "steps", "rounds", "threads", "bookkeeping_s", "bookkeeping_share")
        stored["data"]["loop_overhead"] = {k: overhead[k] for k in keep}
        write_result(
            out,
            stored["data"],
            command=command + f" --loop-overhead --loop-steps {args.loop_steps} --loop-rounds {args.loop_rounds}",
        )
    return 0


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
    _add_sample(sub)
    _add_eval(sub)
    _add_plot(sub)
    _add_bench(sub)
    return parser


def _add_plot(sub) -> None:
    p_plot = sub.add_parser(
        "plot",
        help="draw a run's metrics.csv: loss, validation, learning rate, gradient norm",
        description="Draw the curves of a run's metrics.csv against the step: training and validation loss, "
        "learning rate and gradient norm, with the steps where the run was resumed or interrupted and its "
        "spikes and skipped updates marked.",
    )
    p_plot.add_argument("log_dir", metavar="LOG_DIR", help="the run's --log-dir (or its metrics.csv)")
    p_plot.add_argument(
        "--out", default=None, metavar="FILE.png", help="image to write; its suffix picks the format "
        "(default: metrics.png beside metrics.csv)",
    )  # fmt: skip
    p_plot.set_defaults(func=_cmd_plot)


def _add_info(sub) -> None:
    p_info = sub.add_parser(
        "info", help="versions, device, preset, peak FLOP/s, whether bf16 and FP8 products are fast"
    )
    p_info.add_argument("--json", action="store_true", help="print as JSON")
    p_info.set_defaults(func=_cmd_info)


def _add_memory(sub) -> None:
    p_mem = sub.add_parser(
        "memory",
        help="bytes per GPU of training a model (chapter 7)",
        description="Estimate parameters, gradients, master weights, optimizer states and activations per GPU.",
    )
    p_mem.add_argument("--params", type=float, default=None, help="parameter count, e.g. 175e9 (default)")
    p_mem.add_argument(
        "--model",
        choices=["gpt2-small", "gpt3-175b"],
        default=None,
        help="a known shape instead of --params (adds activations and the KV cache of generating)",
    )
    p_mem.add_argument("--batch-size", type=int, default=1, help="micro-batch per GPU (default: 1)")
    p_mem.add_argument("--seq-len", type=int, default=None, help="tokens per sequence (default: the context)")
    p_mem.add_argument(
        "--precision",
        default="bf16-mixed",
        choices=_names("gputrain.memory.recipes", "RECIPES"),
        help="precision recipe (default: bf16-mixed)",
    )
    p_mem.add_argument(
        "--optimizer",
        default="adam",
        choices=_names("gputrain.memory.recipes", "OPTIMIZER_STATES"),
        help="whose states to count (default: adam)",
    )
    p_mem.add_argument("--checkpointing", action="store_true", help="activation checkpointing")
    p_mem.add_argument("--zero-stage", type=int, default=0, help="ZeRO stage 0-3 (default: 0)")
    p_mem.add_argument("--dp", type=int, default=1, help="data-parallel degree (default: 1)")
    p_mem.add_argument(
        "--activation-model",
        choices=_names("gputrain.memory.activations", "ACTIVATION_MODELS"),
        default="korthikanti",
        help="our GPT's saved tensors or Korthikanti et al.'s formula (default)",
    )
    p_mem.add_argument("--json", action="store_true", help="print as JSON")
    p_mem.set_defaults(func=_cmd_memory)


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


def _add_sample(sub) -> None:
    p_sample = sub.add_parser(
        "sample",
        help="generate text from a trained checkpoint",
        description="Print the prompt and the bytes a trained GPT samples after it, as they are generated "
        "(Ctrl-C stops and keeps what was printed).",
    )
    p_sample.add_argument("--checkpoint", required=True, help="a checkpoint (step_...) or a checkpoint_dir")
    p_sample.add_argument("--prompt", default=None, help="text to continue (default: a newline)")
    p_sample.add_argument("--prompt-file", default=None, metavar="FILE", help="read the prompt from a UTF-8 file")
    p_sample.add_argument(
        "--tokens", type=int, default=200, help="bytes to generate per sample, printed as they come (default: 200)"
    )
    p_sample.add_argument("--num-samples", type=int, default=1, metavar="N", help="samples to draw (default: 1)")
    p_sample.add_argument("--temperature", type=_finite_float, default=0.8, help="logit divisor (default: 0.8)")
    p_sample.add_argument("--top-k", type=int, default=40, help="keep the k likeliest bytes, 0 for all (default: 40)")
    p_sample.add_argument("--seed", type=int, default=1, help="sampling seed (default: 1)")
    p_sample.set_defaults(func=_cmd_sample)


def _add_eval(sub) -> None:
    p_eval = sub.add_parser(
        "eval",
        help="loss, perplexity and bits per byte of a checkpoint on held-out text",
        description="Evaluate a trained GPT. Without --data: its own run's validation split, read as the run's "
        "validation pass reads it (its batch size and number of batches), so the loss is the validation loss "
        "the run logged for these weights; --max-batches and --batch-size read more or less of it.",
    )
    p_eval.add_argument("--checkpoint", required=True, help="a checkpoint (step_...) or a checkpoint_dir")
    p_eval.add_argument("--data", default=None, help="'stdlib', text files 'a.txt,dir/*.py' or 'hf:NAME[:SPLIT]'")
    p_eval.add_argument("--corpus-bytes", type=int, default=400_000, help="read at most this many bytes of --data")
    p_eval.add_argument(
        "--max-batches", type=int, default=None, help="batches to evaluate (default: the run's eval_batches)"
    )
    p_eval.add_argument("--batch-size", type=int, default=None, help="windows per batch (default: the run's)")
    p_eval.add_argument("--json", action="store_true", help="print as JSON")
    p_eval.set_defaults(func=_cmd_eval)


def _add_bench(sub) -> None:
    p_bench = sub.add_parser(
        "bench",
        help="the speed ladder: tokens/s, MFU and memory per optimization",
        description="Train one GPT with fp32, TF32, fused AdamW, bf16, flash attention, "
        "torch.compile, a larger batch and a padded vocabulary, one change at "
        "a time, on this machine; print a table and write JSON. The cpu preset leaves "
        "torch.compile out (--compile adds minutes of compiling) and then times the training "
        "loop's overhead: about 100 s on a quiet two-core machine, several times that on a busy one.",
    )
    p_bench.add_argument(
        "--preset",
        choices=["cpu", "gpu"],
        default=None,
        help="model size: a small GPT ('cpu') or GPT-2 small ('gpu'); default: this machine's "
        "(gpu with CUDA, else cpu; GPUTRAIN_PRESET overrides); the defaults below follow it",
    )
    p_bench.add_argument(
        "--out", default=None, help="JSON file (default: OUT_DIR/ladder.json, ladder_cpu.json on the cpu preset)"
    )
    p_bench.add_argument("--out-dir", default=".", help="folder for the default JSON file (default: here)")
    p_bench.add_argument("--dry-run", action="store_true", help="print the plan (rungs, skips) and exit")
    p_bench.add_argument(
        "--loop-overhead",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also time gputrain.train against a plain loop (default: on cpu)",
    )
    p_bench.add_argument("--loop-steps", type=int, default=150, help="steps per loop-overhead run (default: 150)")
    p_bench.add_argument("--loop-rounds", type=int, default=5, help="loop-overhead rounds (default: 5)")
    _add_config_flags(p_bench, LADDER_CONFIG, _preset_default)
    p_bench.set_defaults(func=_cmd_bench)


def _preset_default(name: str) -> str:
    """Help text of a ladder flag's default under each preset (the dataclass's own default is neither's)."""
    from .bench import ladder_config  # imported only when --help is printed

    cpu, gpu = (getattr(ladder_config(preset), name) for preset in ("cpu", "gpu"))
    return f"default: {cpu}" if cpu == gpu else f"default: {cpu} on cpu, {gpu} on gpu"


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


if __name__ == "__main__":
    raise SystemExit(main())

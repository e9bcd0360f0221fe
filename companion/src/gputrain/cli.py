"""Command line: ``gputrain info | train | sample | eval | memory | bench``; also ``python -m gputrain``.

Bad input never gets a traceback: one line on stderr naming the fix, exit
code 2, and nothing written.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import os
import re
import sys
from pathlib import Path
from typing import Optional, Sequence

from .bench import COMPILE_SCOPES, LadderConfig, ladder_config, plan, run_ladder
from .device import info, preset
from .memory import ACTIVATION_MODELS, GPT2_SMALL, GPT3_175B, OPTIMIZER_STATES, RECIPES, estimate
from .moe import BALANCES, ROUTERS
from .results import read_result, write_result
from .train import (
    MIXED_PRECISION,
    OPTIMIZERS,
    PRESETS,
    SCHEDULES,
    CheckpointError,
    TrainConfig,
    TrainingDiverged,
    evaluate_text,
    preset_config,
    sample,
    summary_line,
    train,
)
from .train.overhead import loop_overhead

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


# fields whose value is a name from one of the package's tables: the flag offers exactly those
CHOICES = {
    "optimizer": OPTIMIZERS,
    "schedule": SCHEDULES,
    "mixed_precision": MIXED_PRECISION,
    "compile_scope": COMPILE_SCOPES,
    "router": ROUTERS,
    "balance": BALANCES,
}


def _add_config_flags(parser: argparse.ArgumentParser, cls, defaults: Optional[dict] = None) -> None:
    """One flag per field of ``cls``; ``defaults`` (field -> text) replaces the dataclass default in the help."""
    helps = _field_help(cls)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        kind = type(f.default)
        help_text = f"{helps.get(f.name, '')} ({(defaults or {}).get(f.name) or f'default: {f.default}'})"
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif f.name in CHOICES:
            parser.add_argument(flag, choices=list(CHOICES[f.name]), default=None, help=help_text)
        else:
            parser.add_argument(flag, type=kind, default=None, metavar=kind.__name__.upper(), help=help_text)


def _cmd_info(args) -> int:
    data = info()
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        width = max(len(k) for k in data)
        for key, value in data.items():
            print(f"{key:<{width}}  {'unknown' if value is None else value}")
    return 0


def _cmd_train(args) -> int:
    overrides = {
        f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig) if getattr(args, f.name) is not None
    }
    launcher_precision = os.environ.get("ACCELERATE_MIXED_PRECISION")  # set by accelerate launch --mixed_precision
    if "mixed_precision" not in overrides and launcher_precision:
        overrides["mixed_precision"] = launcher_precision  # the launcher's choice, unless the flag says otherwise
    if args.quiet and "progress" not in overrides:
        overrides["progress"] = False
    cfg = preset_config(args.preset, **overrides)  # validates: ValueError on a bad field
    try:
        result = train(cfg)  # with progress on, it prints its own summary line on the main process
    except TrainingDiverged as exc:  # not a usage error: the run itself went wrong
        print(f"gputrain train: stopped: {exc}", file=sys.stderr)
        return 1
    if not (args.quiet or cfg.progress) and result.is_main_process:
        print(summary_line(result))
    return 0


def _cmd_sample(args) -> int:
    print(
        sample(
            args.checkpoint,
            prompt=args.prompt,
            tokens=args.tokens,
            temperature=args.temperature,
            top_k=args.top_k,
            seed=args.seed,
        )
    )
    return 0


def _cmd_eval(args) -> int:
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
            f"bits/byte {r['bits_per_byte']:.4f}   ({r['tokens']:,} tokens of {r['data']}: {r['held_out']})"
        )
    return 0


def _cmd_memory(args) -> int:
    shapes = {"gpt2-small": GPT2_SMALL, "gpt3-175b": GPT3_175B}
    if args.model is not None and args.params is not None:
        raise ValueError("give either --params or --model, not both")
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
    if args.json:
        print(json.dumps({"settings": e.settings, "bytes": e.as_dict()}, indent=2))
    else:
        print(
            f"{e.settings['params']:.4g} parameters, {e.settings['precision']}, {args.optimizer}, "
            f"ZeRO stage {args.zero_stage} over {args.dp} GPU(s); bytes per GPU:"
        )
        print(e.table())
    return 0


def _flag_text(name: str, value) -> str:
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else "--no-" + flag[2:]
    return f"{flag} {value}"


def _cmd_bench(args) -> int:
    name = args.preset or preset()
    overrides = {
        f.name: getattr(args, f.name) for f in dataclasses.fields(LadderConfig) if getattr(args, f.name) is not None
    }
    cfg = ladder_config(name, **overrides)  # validates: ValueError on a bad field
    if args.dry_run:
        print(plan(cfg))
        return 0
    out = args.out or str(Path(args.out_dir) / f"ladder{'' if name == 'gpu' else '_cpu'}.json")
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
        stored["data"]["loop_overhead"] = {k: overhead[k] for k in ("ratio", "steps", "rounds", "threads")}
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
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=OneLineParser)

    _add_info(sub)
    _add_memory(sub)
    _add_train(sub)
    _add_sample(sub)
    _add_eval(sub)
    _add_bench(sub)
    return parser


def _add_info(sub) -> None:
    p_info = sub.add_parser("info", help="versions, device, preset and known peak FLOP/s")
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
        help="a known shape instead of --params (adds activations)",
    )
    p_mem.add_argument("--batch-size", type=int, default=1, help="micro-batch per GPU (default: 1)")
    p_mem.add_argument("--seq-len", type=int, default=None, help="tokens per sequence (default: the context)")
    p_mem.add_argument(
        "--precision", default="bf16-mixed", choices=list(RECIPES), help="precision recipe (default: bf16-mixed)"
    )
    p_mem.add_argument(
        "--optimizer", default="adam", choices=list(OPTIMIZER_STATES), help="whose states to count (default: adam)"
    )
    p_mem.add_argument("--checkpointing", action="store_true", help="activation checkpointing")
    p_mem.add_argument("--zero-stage", type=int, default=0, help="ZeRO stage 0-3 (default: 0)")
    p_mem.add_argument("--dp", type=int, default=1, help="data-parallel degree (default: 1)")
    p_mem.add_argument(
        "--activation-model",
        choices=list(ACTIVATION_MODELS),
        default="korthikanti",
        help="our GPT's saved tensors or Korthikanti et al.'s formula (default)",
    )
    p_mem.add_argument("--json", action="store_true", help="print as JSON")
    p_mem.set_defaults(func=_cmd_memory)


def _add_train(sub) -> None:
    p_train = sub.add_parser(
        "train",
        help="train a GPT on the offline corpus",
        description="Train a GPT on the offline corpus. Every TrainConfig field is a flag.",
    )
    p_train.add_argument(
        "--preset",
        choices=list(PRESETS),
        default="tiny",
        help="starting configuration; the flags below override its fields",
    )
    p_train.add_argument("--quiet", action="store_true", help="print nothing at the end (and no progress bar)")
    _add_config_flags(p_train, TrainConfig)
    p_train.set_defaults(func=_cmd_train)


def _add_sample(sub) -> None:
    p_sample = sub.add_parser(
        "sample",
        help="generate text from a trained checkpoint",
        description="Print the prompt and the bytes a trained GPT samples after it.",
    )
    p_sample.add_argument("--checkpoint", required=True, help="a checkpoint (step_...) or a checkpoint_dir")
    p_sample.add_argument("--prompt", default="\n", help="text to continue (default: a newline)")
    p_sample.add_argument("--tokens", type=int, default=200, help="bytes to generate (default: 200)")
    p_sample.add_argument("--temperature", type=float, default=0.8, help="logit divisor (default: 0.8)")
    p_sample.add_argument("--top-k", type=int, default=40, help="keep the k likeliest bytes, 0 for all (default: 40)")
    p_sample.add_argument("--seed", type=int, default=1, help="sampling seed (default: 1)")
    p_sample.set_defaults(func=_cmd_sample)


def _add_eval(sub) -> None:
    p_eval = sub.add_parser(
        "eval",
        help="loss, perplexity and bits per byte of a checkpoint on held-out text",
        description="Evaluate a trained GPT. Without --data: its own run's validation split.",
    )
    p_eval.add_argument("--checkpoint", required=True, help="a checkpoint (step_...) or a checkpoint_dir")
    p_eval.add_argument("--data", default=None, help="'stdlib', text files 'a.txt,dir/*.py' or 'hf:NAME[:SPLIT]'")
    p_eval.add_argument("--corpus-bytes", type=int, default=400_000, help="read at most this many bytes of --data")
    p_eval.add_argument("--max-batches", type=int, default=50, help="batches to evaluate (default: 50)")
    p_eval.add_argument("--batch-size", type=int, default=16, help="windows per batch (default: 16)")
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
    _add_config_flags(p_bench, LadderConfig, _preset_defaults())
    p_bench.set_defaults(func=_cmd_bench)


def _preset_defaults() -> dict[str, str]:
    """Help text of each ladder flag's default under each preset (the dataclass's own default is neither's)."""
    cpu, gpu = (dataclasses.asdict(ladder_config(name)) for name in ("cpu", "gpu"))
    return {
        name: f"default: {cpu[name]}" if cpu[name] == gpu[name] else f"default: {cpu[name]} on cpu, {gpu[name]} on gpu"
        for name in cpu
    }


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(_attach_negative_numbers(sys.argv[1:] if argv is None else argv))
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, CheckpointError) as exc:
        print(f"gputrain {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    raise SystemExit(main())

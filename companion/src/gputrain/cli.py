"""Command line: ``gputrain info | train | memory | bench``; also ``python -m gputrain``.

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
    launcher_precision = os.environ.get("ACCELERATE_MIXED_PRECISION")  # set by accelerate launch --mixed_precision
    if "mixed_precision" not in overrides and launcher_precision:
        overrides["mixed_precision"] = launcher_precision  # the launcher's choice, unless the flag says otherwise
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


def _flag_text(name: str, value) -> str:
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else "--no-" + flag[2:]
    return f"{flag} {value}"


def _loop_overhead(steps: int, rounds: int, threads: int = 0) -> Optional[float]:
    """Run bench/loop_overhead.py (gputrain.train against a plain loop) and return its ratio of medians.

    ``threads`` > 0 pins both loops to that many CPU threads (OMP_NUM_THREADS), as the ladder does.
    """
    import subprocess
    from pathlib import Path

    here = Path(__file__).resolve()
    scripts = [Path.cwd() / "bench" / "loop_overhead.py", here.parents[3] / "bench" / "loop_overhead.py"]
    script = next((s for s in scripts if s.is_file()), None)
    if script is None:
        print("loop overhead: bench/loop_overhead.py not found (run from the book's repository)")
        return None
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(here.parents[1]),
                                                                    os.environ.get("PYTHONPATH", "")]))}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    proc = subprocess.run([sys.executable, str(script), "--steps", str(steps), "--rounds", str(rounds)],
                          capture_output=True, text=True, env=env)
    print(proc.stdout, end="")
    found = re.search(r"ratio of medians ([0-9.]+)", proc.stdout)
    if proc.returncode or not found:
        print(f"loop overhead: {script} failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
        return None
    return float(found.group(1))


def _cmd_bench(args) -> int:
    from .bench import LadderConfig, ladder_config, plan, run_ladder
    from .device import preset, read_result, write_result

    name = args.preset or preset()
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(LadderConfig)
                 if getattr(args, f.name) is not None}
    cfg = ladder_config(name, **overrides)  # validates: ValueError on a bad field
    if args.dry_run:
        print(plan(cfg))
        return 0
    out = args.out or f"book/results/ladder{'' if name == 'gpu' else '_cpu'}.json"
    command = " ".join(["gputrain bench", f"--preset {name}", *(_flag_text(k, v) for k, v in overrides.items())])
    result = run_ladder(cfg, out=out, command=command, log=lambda m: print(m, file=sys.stderr, flush=True))
    print(result.table())
    print(f"model FLOPs per token 6N + 12LTC = {result.flops_per_token:,} (N = {result.n_params:,}); "
          f"measured peak: {result.peak_measured_source}; wrote {out}")
    if args.loop_overhead if args.loop_overhead is not None else name == "cpu":
        ratio = _loop_overhead(args.loop_steps, args.loop_rounds, cfg.threads)
        if ratio is not None:
            print(f"gputrain.train / plain PyTorch loop, tokens/s: {ratio:.3f}")
            stored = read_result(out)
            stored["data"]["loop_overhead"] = {"ratio": ratio, "steps": args.loop_steps, "rounds": args.loop_rounds,
                                               "threads": cfg.threads or None}
            write_result(out, stored["data"], command=command + f" --loop-overhead --loop-steps {args.loop_steps} "
                                                                f"--loop-rounds {args.loop_rounds}")
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

    from .bench import LadderConfig

    p_bench = sub.add_parser("bench", help="the speed ladder: tokens/s, MFU and memory per optimization",
                             description="Train one GPT with fp32, TF32, fused AdamW, bf16, flash attention, "
                                         "torch.compile, a larger batch and a padded vocabulary, one change at "
                                         "a time, on this machine; print a table and write JSON.")
    p_bench.add_argument("--preset", choices=["cpu", "gpu"], default=None,
                         help="model size: a small GPT ('cpu') or GPT-2 small ('gpu'); default: this machine's")
    p_bench.add_argument("--out", default=None,
                         help="JSON file (default: book/results/ladder.json, ladder_cpu.json on the cpu preset)")
    p_bench.add_argument("--dry-run", action="store_true", help="print the plan (rungs, skips) and exit")
    p_bench.add_argument("--loop-overhead", action=argparse.BooleanOptionalAction, default=None,
                         help="also run bench/loop_overhead.py: gputrain.train vs a plain loop (default: on cpu)")
    p_bench.add_argument("--loop-steps", type=int, default=300, help="steps per loop-overhead run (default: 300)")
    p_bench.add_argument("--loop-rounds", type=int, default=7, help="loop-overhead rounds (default: 7)")
    _add_config_flags(p_bench, LadderConfig)
    p_bench.set_defaults(func=_cmd_bench)
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

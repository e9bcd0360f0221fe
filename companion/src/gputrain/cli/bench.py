"""``gputrain bench``: the speed ladder, its plan, and the training loop's overhead."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

from .flags import LADDER_CONFIG, _add_config_flags, _given


def _flag_text(name: str, value) -> str:
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else "--no-" + flag[2:]
    return f"{flag} {value}"


def _check_bench_args(args, out: Optional[str]) -> None:
    """Every bench flag checked before the ladder runs: counts, and the JSON file's folder probed for writing."""
    from ..train.rundir import probe_directory, remove_created

    for flag, value in (("--loop-steps", args.loop_steps), ("--loop-rounds", args.loop_rounds)):
        if value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}")
    if out is None:  # a dry run writes nothing
        return
    if Path(out).is_dir():
        raise ValueError(f"--out {out} is a directory; name a JSON file, e.g. --out {Path(out) / 'ladder.json'}")
    remove_created(probe_directory("the folder of --out", Path(out).parent))  # writable? then leave nothing behind


def _cmd_bench(args) -> int:
    from ..bench import ladder_config, plan, run_ladder
    from ..device import preset
    from ..results import read_result, write_result
    from ..train.overhead import loop_overhead

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
    from ..bench import ladder_config  # imported only when --help is printed

    cpu, gpu = (getattr(ladder_config(preset), name) for preset in ("cpu", "gpu"))
    return f"default: {cpu}" if cpu == gpu else f"default: {cpu} on cpu, {gpu} on gpu"

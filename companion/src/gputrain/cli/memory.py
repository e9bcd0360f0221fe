"""``gputrain memory``: bytes per GPU of training a model (chapter 7), or of a post-training stage (chapter 13).

``--stage sft|dpo|grpo|ppo`` counts the models a stage holds (trained or
frozen) and the rollouts' KV cache, for GPT-2 small, a 7B and a 70B model
(or the one ``--model`` names), against one H100's and one H200's memory.
"""

from __future__ import annotations

import json
import math

from .flags import _names

# What `gputrain memory` answers for: from one parameter (or one sequence of one token) up to a thousand
# times today's largest models and batches; past that the bytes overflow a float (inf) or print 300 digits.
MEMORY_BOUNDS = {
    "--params": (1, 1e15, "7e9"),
    "--batch-size": (1, 10**7, "8"),
    "--seq-len": (1, 10**8, "1024"),
    "--rollout-batch": (1, 10**7, "64"),
}


def _check_memory_args(args, shapes: dict) -> None:
    """Sizes ``estimate`` would take but cannot mean: outside :data:`MEMORY_BOUNDS`, or beyond the model's context."""
    sizes = (("--params", args.params), ("--batch-size", args.batch_size), ("--seq-len", args.seq_len))
    for flag, value in (*sizes, ("--rollout-batch", args.rollout_batch)):
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
    from ..memory import GPT3_175B, RECIPES, STAGE_MODELS, estimate, kv_cache_bytes

    shapes = {**STAGE_MODELS, "gpt3-175b": GPT3_175B}
    if args.model is not None and args.params is not None:
        raise ValueError("give either --params or --model, not both")
    _check_memory_args(args, shapes)
    if args.stage is not None:
        return _cmd_stage(args)
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


def _check_stage_args(args) -> list[str]:
    """The models ``--stage`` counts; one line for a flag it cannot honour."""
    from ..memory import STAGE_MODELS

    if args.params is not None:
        raise ValueError(f"--stage needs a model's shape, not --params; use --model {' or '.join(STAGE_MODELS)}")
    if args.model is not None and args.model not in STAGE_MODELS:
        raise ValueError(f"--stage counts --model {', '.join(STAGE_MODELS)}; got {args.model}")
    if args.zero_stage or args.dp != 1:
        raise ValueError("--stage counts one GPU without ZeRO; drop --zero-stage and --dp")
    if args.activation_model != "korthikanti":
        raise ValueError("--stage counts activations by Korthikanti et al.'s formula; drop --activation-model")
    return [args.model] if args.model else list(STAGE_MODELS)


def _cmd_stage(args) -> int:
    from ..device import GPU_SPECS
    from ..memory import STAGE_GPUS, stage_memory

    sizes = dict(batch_size=args.batch_size, seq_len=args.seq_len, rollout_batch=args.rollout_batch)
    how = dict(precision=args.precision, optimizer=args.optimizer, activation_checkpointing=args.checkpointing)
    found = [stage_memory(args.stage, m, **sizes, **how) for m in _check_stage_args(args)]
    if args.json:
        rows = [
            {"model": s.model, "settings": s.settings, "resident": s.resident, "learning": s.learning}
            | {"rollout": s.rollout, "peak": s.peak, "total": s.total, "fits": {g: s.fits(g) for g in STAGE_GPUS}}
            for s in found
        ]
        print(json.dumps({"stage": args.stage, "models": rows}, indent=2))
        return 0
    first = found[0].settings
    print(
        f"{args.stage.upper()} on one GPU: {first['precision']}, {args.optimizer}, micro-batch {args.batch_size}"
        + (" pairs" if args.stage == "dpo" else "")
        + (f", rollouts of {args.rollout_batch} sequences" if first["rollout_batch"] else "")
        + (", activation checkpointing" if args.checkpointing else "")
        + "; frozen models hold weights only; the KV cache is freed before learning (peak)"
    )
    print(
        "assumed: value and reward models of the policy's shape; activations by Korthikanti et al.'s formula; "
        "7b is LLaMA 7B's shape, 70b Llama 3 70B's (8 key/value heads)"
    )
    for s in found:
        print(f"\n{s.model} ({s.settings['params']:.3g} parameters, {s.settings['seq_len']:,} tokens per sequence)")
        width = max(len(name) for name, _ in s.rows())
        print("\n".join(f"  {name:<{width}}  {b / 1e9:12,.3f} GB" for name, b in s.rows()))
        verdicts = [f"{g} ({GPU_SPECS[g].hbm_bytes / 1e9:.1f} GB) {'yes' if s.fits(g) else 'no'}" for g in STAGE_GPUS]
        print(f"  peak fits on one: {'; '.join(verdicts)}")
    return 0


def _add_memory(sub) -> None:
    p_mem = sub.add_parser(
        "memory",
        help="bytes per GPU of training a model (chapter 7)",
        description="Estimate parameters, gradients, master weights, optimizer states and activations per GPU.",
    )
    p_mem.add_argument("--params", type=float, default=None, help="parameter count, e.g. 175e9 (default)")
    p_mem.add_argument(
        "--model",
        choices=list(dict.fromkeys(["gpt2-small", "gpt3-175b", *_names("gputrain.memory.stages", "STAGE_MODELS")])),
        default=None,
        help="a known shape instead of --params (adds activations and the KV cache of generating)",
    )
    p_mem.add_argument(
        "--stage",
        choices=_names("gputrain.memory.stages", "STAGES"),
        default=None,
        help="a post-training stage: its models (trained, frozen) and rollouts' KV cache vs H100/H200 (chapter 13)",
    )
    p_mem.add_argument(
        "--rollout-batch",
        type=int,
        default=64,
        help="with --stage grpo|ppo: sequences sampled at once (default: 64, 8 prompts x 8)",
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

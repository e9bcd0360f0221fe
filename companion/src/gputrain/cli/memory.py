"""``gputrain memory``: bytes per GPU of training a model (chapter 7), within the sizes it answers for."""

from __future__ import annotations

import json
import math

from .flags import _names

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
    from ..memory import GPT2_SMALL, GPT3_175B, RECIPES, estimate, kv_cache_bytes

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

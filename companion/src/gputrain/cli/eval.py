"""``gputrain eval``: loss, perplexity and bits per byte of a checkpoint on held-out text."""

from __future__ import annotations

import json


def _cmd_eval(args) -> int:
    from ..train import evaluate_text

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

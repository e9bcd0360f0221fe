"""``gputrain eval``: loss, perplexity and bits per byte on held-out text, or accuracy and pass@k on a task."""

from __future__ import annotations

import json

from .flags import CHOICES, _finite_float, _names

_TEXT_FLAGS = ("data", "corpus_bytes", "max_batches", "batch_size")  # the text evaluation's own flags
_TASK_FLAGS = ("problems", "samples", "digits", "ops", "temperature", "top_k", "seed", "shots", "k")
_TASK_DEFAULTS = dict(problems=100, samples=16, digits=2, ops="+*", temperature=1.0, top_k=0, seed=0)


def _cmd_eval(args) -> int:
    if args.task is not None:
        return _cmd_eval_task(args)
    stray = [f for f in _TASK_FLAGS if getattr(args, f) is not None]
    if stray:
        raise ValueError(f"--{stray[0].replace('_', '-')} is for a task's accuracy; add --task ({_task_names()})")
    from ..train import evaluate_text

    r = evaluate_text(
        args.checkpoint,
        args.data,
        corpus_bytes=400_000 if args.corpus_bytes is None else args.corpus_bytes,
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


def _task_names() -> str:
    return " or ".join(_names(*CHOICES["task"]))


def _ks(text: str | None, samples: int) -> list[int]:
    """``--k 1,4,16`` as numbers; by default the powers of two up to ``samples``, and ``samples`` itself."""
    if text is None:
        return sorted({2**i for i in range(samples.bit_length()) if 2**i <= samples} | {samples}) if samples else []
    if not samples:
        raise ValueError("--k needs sampled replies; give --samples N (N >= the largest k)")
    try:
        ks = [int(k) for k in text.split(",")]
    except ValueError:
        raise ValueError(f"--k takes whole numbers separated by commas, like 1,4,16; got {text!r}") from None
    if not all(1 <= k <= samples for k in ks):
        raise ValueError(f"--k {text}: pass@k needs 1 <= k <= --samples ({samples}); raise --samples or lower k")
    return ks


def _cmd_eval_task(args) -> int:
    stray = [f for f in _TEXT_FLAGS if getattr(args, f) is not None]
    if stray:
        raise ValueError(f"--{stray[0].replace('_', '-')} is for the evaluation on text; leave it out with --task")
    opts = {f: _TASK_DEFAULTS[f] if getattr(args, f) is None else getattr(args, f) for f in _TASK_DEFAULTS}
    if opts["problems"] < 1 or opts["samples"] < 0:
        raise ValueError(f"--problems must be >= 1 and --samples >= 0; got {opts['problems']} and {opts['samples']}")
    if not opts["ops"] or set(opts["ops"]) - set("+-*"):
        raise ValueError(f"--ops takes arithmetic's operations, some of + - * (e.g. --ops +); got {opts['ops']!r}")
    ks = _ks(args.k, opts["samples"])
    from ..posttrain import evaluate_task, load_chat_model, problems

    test = problems(
        args.task, opts["problems"], split="test", seed=opts["seed"], digits=opts["digits"], ops=tuple(opts["ops"])
    )
    model, fmt = load_chat_model(args.checkpoint)
    r = evaluate_task(
        model,
        fmt,
        test,
        samples=opts["samples"],
        temperature=opts["temperature"],
        top_k=opts["top_k"] or None,
        ks=ks,
        seed=opts["seed"],
        shots=args.shots,
        digits=opts["digits"],
    )
    if args.json:
        info = {"checkpoint": str(args.checkpoint), "digits": opts["digits"], "ops": opts["ops"]}
        print(json.dumps({**info, **r.to_dict()}, indent=2))
    else:
        print(r.summary())
        if r.pass_at:
            print(r.table())
    return 0


def _add_eval(sub) -> None:
    p_eval = sub.add_parser(
        "eval",
        help="loss, perplexity and bits per byte of a checkpoint on held-out text",
        description="Evaluate a trained GPT. Without --data: its own run's validation split, read as the run's "
        "validation pass reads it (its batch size and number of batches), so the loss is the validation loss "
        "the run logged for these weights; --max-batches and --batch-size read more or less of it. "
        "With --task: its greedy accuracy and pass@k on the task's held-out test problems, with 95%% intervals "
        "(a chat checkpoint is asked in a chat turn, a pretrained one with --shots solved train problems first).",
    )
    p_eval.add_argument("--checkpoint", required=True, help="a checkpoint (step_...) or a checkpoint_dir")
    p_eval.add_argument("--data", default=None, help="'stdlib', text files 'a.txt,dir/*.py' or 'hf:NAME[:SPLIT]'")
    p_eval.add_argument(
        "--corpus-bytes", type=int, default=None, help="read at most this many bytes of --data (default: 400,000)"
    )
    p_eval.add_argument(
        "--max-batches", type=int, default=None, help="batches to evaluate (default: the run's eval_batches)"
    )
    p_eval.add_argument("--batch-size", type=int, default=None, help="windows per batch (default: the run's)")
    _add_task_flags(p_eval)
    p_eval.add_argument("--json", action="store_true", help="print as JSON")
    p_eval.set_defaults(func=_cmd_eval)


def _add_task_flags(p_eval) -> None:
    t = p_eval.add_argument_group("a task (chapter 12)", "accuracy and pass@k instead of the loss on text")
    t.add_argument("--task", choices=_names(*CHOICES["task"]), default=None, help="score the checkpoint on this task")
    t.add_argument("--problems", type=int, default=None, metavar="N", help="test problems (default: 100)")
    t.add_argument(
        "--samples", type=int, default=None, metavar="N", help="sampled replies per problem for pass@k (default: 16)"
    )
    t.add_argument("--digits", type=int, default=None, help="operand digits, the difficulty (default: 2)")
    t.add_argument(
        "--ops", default=None, help="arithmetic's operations, e.g. + to match gputrain rl's default (default: +*)"
    )
    t.add_argument(
        "--temperature", type=_finite_float, default=None, help="of the samples; greedy is always 0 (default: 1.0)"
    )
    t.add_argument("--top-k", type=int, default=None, help="the samples keep the k likeliest tokens, 0: all (default)")
    t.add_argument("--seed", type=int, default=None, help="problems, examples, samples, bootstrap (default: 0)")
    t.add_argument(
        "--shots", type=int, default=None, help="solved train problems before each question (default: 3 base, 0 chat)"
    )
    t.add_argument("--k", default=None, metavar="K,K,...", help="pass@k for these k (default: 1, 2, 4, ... samples)")

"""``gputrain sample``: the bytes a trained GPT samples after a prompt, printed as they come; or a chat reply."""

from __future__ import annotations

from pathlib import Path

from .flags import _finite_float

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


def _cmd_chat(args) -> int:
    """``--chat``: the prompt as the user's turn, and the fine-tuned model's reply to it (chapter 12)."""
    if args.prompt is None and args.prompt_file is None:
        raise ValueError("--chat needs the user's message: give --prompt TEXT or --prompt-file FILE")
    prompt = _read_prompt(args)
    if args.tokens < 1 or args.num_samples < 1:
        raise ValueError(f"tokens and num_samples must be >= 1, got {args.tokens} and {args.num_samples}")
    from ..posttrain import check_sampling, generate_replies, load_chat_model

    check_sampling(args.temperature, args.top_k, args.num_samples, args.tokens)
    model, fmt = load_chat_model(args.checkpoint)
    if fmt is None:
        raise ValueError(
            f"checkpoint {args.checkpoint} was not fine-tuned for chat (it has no chat format); fine-tune it with "
            f"`gputrain sft --from {args.checkpoint} --data FILE.jsonl --checkpoint-dir DIR`, or leave out --chat"
        )
    ids = fmt.encode_prompt([{"role": "user", "content": prompt}], block_size=model.cfg.block_size)
    replies = generate_replies(
        model,
        [ids],
        stop=fmt.end_id,
        samples=args.num_samples,
        temperature=args.temperature,
        top_k=args.top_k or None,
        seed=args.seed,
        max_new_tokens=args.tokens,
    )[0]
    for n, reply in enumerate(replies):
        if n:
            print(SAMPLE_SEPARATOR)
        print(fmt.reply(reply), flush=True)
    return 0


def _cmd_sample(args) -> int:
    if args.chat:
        return _cmd_chat(args)
    from ..train import stream_samples

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
    p_sample.add_argument(
        "--chat",
        action="store_true",
        help="the prompt is a user's message to a chat checkpoint (gputrain sft): print the assistant's reply, "
        "up to its end-of-turn or --tokens tokens (--temperature 0: greedy)",
    )
    p_sample.set_defaults(func=_cmd_sample)

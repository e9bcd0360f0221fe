"""Using a trained checkpoint (chapter 6): ``sample`` text from it, ``evaluate_text`` on held-out text.

The command line offers both as ``gputrain sample`` and ``gputrain eval``.
A checkpoint is read and verified the same way a resumed run reads it
(safetensors and JSON only, nothing unpickled).
"""

from __future__ import annotations

import codecs
import math
from dataclasses import asdict, fields
from typing import Iterator, Optional

import torch

from ..data import ByteTokenizer, TokenDataset, split_tokens
from ..model import GPT, GPTConfig
from .checkpoint import Checkpoint, CheckpointError, check_compatible, load_weights, read_checkpoint
from .config import TrainConfig
from .inputs import text_source


def load_model(checkpoint) -> tuple[GPT, Checkpoint]:
    """The GPT a checkpoint (or the newest one in a checkpoint_dir) holds, in eval mode, on the CPU."""
    ckpt = read_checkpoint(checkpoint, flag="--checkpoint")  # the flag of sample and eval
    if not ckpt.model_config:
        raise CheckpointError(
            f"checkpoint {str(ckpt.path)!r} holds a custom model, not a gputrain GPT; "
            "load it with the code that built that model"
        )
    if ckpt.model_config.get("posttrain"):  # grown vocabulary and adapters: chapter 12's loader rebuilds them
        raise CheckpointError(
            f"checkpoint {str(ckpt.path)!r} is fine-tuned for chat; load it with "
            "gputrain.posttrain.load_chat_model (gputrain sample --chat, gputrain eval --task)"
        )
    known = {f.name for f in fields(GPTConfig)}
    try:
        cfg = GPTConfig(**{k: v for k, v in ckpt.model_config.items() if k in known})
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {str(ckpt.path)!r} has an unusable model config ({exc})") from None
    model = GPT(cfg)
    check_compatible(ckpt, model, asdict(cfg))
    load_weights(model, ckpt.weights, ckpt.aliases)
    return model.eval(), ckpt


def _as_model(checkpoint_or_model) -> GPT:
    return checkpoint_or_model if isinstance(checkpoint_or_model, GPT) else load_model(checkpoint_or_model)[0]


def _check_sampling(prompt: str, tokens: int, temperature: float, top_k: Optional[int], num_samples: int) -> None:
    if tokens < 1:
        raise ValueError(f"tokens must be >= 1, got {tokens}")
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    if not (temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be a positive number, got {temperature}; try 0.8")
    if top_k is not None and top_k < 0:
        raise ValueError(f"top_k must be >= 1 (or 0 for no cut), got {top_k}")
    if not prompt:
        raise ValueError("prompt is empty; give at least one character (e.g. a newline)")


def stream_samples(
    checkpoint_or_model,
    prompt: str = "\n",
    tokens: int = 200,
    temperature: float = 0.8,
    top_k: Optional[int] = 40,
    seed: int = 1,
    num_samples: int = 1,
    use_cache: bool = True,
) -> Iterator[tuple[int, str]]:
    """Yield ``(sample number, text)`` pieces as the bytes are generated: the prompt first (chapter 6).

    Samples come one after another from one random generator seeded with
    ``seed``.  Bytes are decoded as UTF-8 as they arrive; a character whose
    bytes are still incomplete waits for the rest, and bytes that never form
    valid UTF-8 show as U+FFFD.  ``use_cache`` (the default) keeps a
    :class:`gputrain.model.KVCache`; the text is the same without it, only slower.
    """
    _check_sampling(prompt, tokens, temperature, top_k, num_samples)
    model = _as_model(checkpoint_or_model)
    ids = ByteTokenizer.encode_tensor(prompt)  # (T,)
    if int(ids.max()) >= model.cfg.vocab_size:
        raise ValueError(f"the prompt has bytes beyond the model's vocabulary of {model.cfg.vocab_size}")
    generator = torch.Generator().manual_seed(seed)
    ids = ids[None].to(next(model.parameters()).device)  # (1, T)
    for n in range(num_samples):
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        yield n, prompt
        for nxt in model.stream(ids, tokens, temperature, top_k or None, generator, use_cache):  # (1, 1)
            piece = decoder.decode(bytes([int(nxt)]))
            if piece:
                yield n, piece
        tail = decoder.decode(b"", final=True)
        if tail:
            yield n, tail


def sample(checkpoint_or_model, prompt: str = "\n", tokens: int = 200, **sampling) -> str:
    """The prompt and ``tokens`` sampled bytes after it, decoded as UTF-8 (chapter 6).

    ``sampling``: ``temperature`` divides the logits (default 0.8; lower:
    safer, more repetitive); ``top_k`` keeps only the k likeliest next bytes
    (default 40; 0 or None: all of them); the same ``seed`` (default 1) gives
    the same text.  Bytes that do not form valid UTF-8 are shown as U+FFFD.
    :func:`stream_samples` yields the same text piece by piece.
    """
    return "".join(piece for _, piece in stream_samples(checkpoint_or_model, prompt, tokens, **sampling))


@torch.no_grad()
def evaluate_text(
    checkpoint_or_model,
    data: Optional[str] = None,
    *,
    corpus_bytes: int = 400_000,
    max_batches: Optional[int] = None,
    batch_size: Optional[int] = None,
) -> dict:
    """Loss (nats per byte), perplexity and bits per byte of a model on held-out text (chapter 6).

    Without ``data`` the text is the run's own validation split: the trailing
    ``val_fraction`` of the corpus it trained on, as the checkpoint recorded
    it.  With ``data`` (``'stdlib'``, files, or ``'hf:...'``, as for
    training) the windows come from the start of that text, of which at most
    ``corpus_bytes`` are read (0: all).  By default the windows,
    batches and their number are those of the run's validation pass
    (``seq_len``, ``batch_size``, ``eval_batches``), so on its own split the
    result is the validation loss the run logged for these weights;
    ``max_batches`` and ``batch_size`` change that, and ``"batches"`` in the
    result says which it was.  ``"held_out"`` says exactly what was scored:
    how many of the text's windows, and how many bytes of the input were read
    (``"windows"``, ``"windows_in_text"``, ``"bytes_read"`` and
    ``"bytes_on_disk"`` hold the numbers).
    """
    if (max_batches is not None and max_batches < 1) or (batch_size is not None and batch_size < 1):
        raise ValueError("max_batches and batch_size must be >= 1")
    model, ckpt = (
        (checkpoint_or_model, None) if isinstance(checkpoint_or_model, GPT) else load_model(checkpoint_or_model)
    )
    run = _run_settings(model, ckpt)
    as_in_training = max_batches is None and batch_size is None
    max_batches = run["eval_batches"] if max_batches is None else max_batches
    batch_size = run["batch_size"] if batch_size is None else batch_size
    source, reader, tokens, read = _held_out(model, run, data, corpus_bytes)
    windows = TokenDataset(tokens, run["window"])
    scored = min(len(windows), max_batches * batch_size)
    loss, count, batches = _mean_loss(model, windows, scored, batch_size)
    return {
        "loss": loss,
        "perplexity": math.exp(loss),
        "bits_per_byte": loss / math.log(2),
        "tokens": count,
        "data": source,
        "held_out": _scored(scored, len(windows), data is None, read, reader.capped, reader.input_bytes()),
        "batches": f"{batches} batches of {batch_size} windows of {run['window']} tokens"
        + _which(as_in_training, data),
        "windows": scored,  # windows scored, from the start of the text
        "batch_size": batch_size,  # windows per batch
        "windows_in_text": len(windows),  # windows the text read holds
        "bytes_read": read,  # bytes of text read (the cap, corpus_bytes, may stop short of the input)
        "bytes_on_disk": reader.input_bytes(),  # of the input files (None for a dataset)
    }


def _run_settings(model: GPT, ckpt: Optional[Checkpoint]) -> dict:
    """The validation settings of the run that trained ``model`` (TrainConfig's defaults for a model without its run),
    its window length, and (``"config"``) the run's whole config as the checkpoint recorded it."""
    run_cfg = (ckpt.meta.get("run", {}).get("config") or {}) if ckpt else {}
    defaults = TrainConfig.__dataclass_fields__
    run = {k: run_cfg.get(k, defaults[k].default) for k in ("eval_batches", "batch_size", "seq_len", "val_fraction")}
    run["window"] = min(run["seq_len"] or model.cfg.block_size, model.cfg.block_size)
    run["config"] = run_cfg
    return run


def _held_out(model: GPT, run: dict, data: Optional[str], corpus_bytes: int):
    """The text to score: the run's own validation split (``data`` None) or the start of ``data``.

    Returns its source, its reader, its tokens and the bytes of text read.
    """
    source = data or run["config"].get("data", "stdlib")
    nbytes = run["config"].get("corpus_bytes", corpus_bytes) if data is None else corpus_bytes
    reader = text_source(TrainConfig(data=source, corpus_bytes=nbytes, block_size=model.cfg.block_size))
    text = b"".join(reader.blocks()).decode("utf-8")
    tokens = ByteTokenizer.encode_tensor(text)  # (N,)
    read = len(tokens)  # bytes of text read (after decoding)
    if data is None:
        tokens = split_tokens(tokens, run["val_fraction"])[1]
    if len(tokens) < run["window"] + 1:
        raise ValueError(
            f"{len(tokens)} tokens of held-out text cannot fill one window of {run['window']}; "
            "pass more text with --data"
        )
    return source, reader, tokens, read


def _mean_loss(model: GPT, windows: TokenDataset, scored: int, batch_size: int) -> tuple[float, int, int]:
    """The mean loss over the first ``scored`` windows, in batches: (loss, targets, batches)."""
    total, count, batches = 0.0, 0, 0
    for start in range(0, scored, batch_size):
        x, y = map(torch.stack, zip(*(windows[i] for i in range(start, min(start + batch_size, len(windows))))))
        _, loss = model(x, y)  # x, y (B, T); mean over B*T targets
        total, count, batches = total + loss.item() * y.numel(), count + y.numel(), batches + 1
    return total / count, count, batches


def _scored(scored: int, available: int, own_split: bool, read: int, capped: bool, on_disk: Optional[int]) -> str:
    """What an evaluation scored, exactly: how many of the text's windows, and how much of the input was read."""
    windows = f"all {available:,} windows" if scored == available else f"the first {scored:,} of {available:,} windows"
    if own_split:
        return f"{windows} of the run's validation split"
    if not capped:
        return f"{windows} of all {read:,} bytes of it"
    of = f" of its {on_disk:,} bytes on disk" if on_disk is not None else ""
    return f"{windows} of the first {read:,} bytes{of} (capped by corpus_bytes)"


def _which(as_in_training: bool, data: Optional[str]) -> str:
    if not as_in_training:
        return ""
    return ", as the run's validation pass" if data is None else ", the run's validation settings"

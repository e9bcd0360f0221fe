"""Fine-tuning examples: chat records read and checked, then padded into one tensor (chapter 12).

A record is ``{"messages": [{"role": ..., "content": ...}, ...]}`` or
``{"prompt": ..., "response": ...}``; a file holds one per line (JSONL).
:func:`read_records` refuses a bad line with one error naming the file and
the line; :func:`encode_records` checks each record against the chat format
and the model's context the same way.  :class:`ChatExamples` pads every
example to the longest one: the inputs with ``<|end|>``, the targets with
:data:`~gputrain.posttrain.chat.IGNORE`, so a pad position is never learned
and, attention being causal, never seen by a real one.  The training loop's
batches are then plain ``(x, y)`` pairs like the pretraining windows.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import torch
from torch.utils.data import Dataset

from .chat import IGNORE, ChatFormat, Encoded, as_messages


def read_records(path) -> list[dict]:
    """Every line of a JSONL file as a record; a line that is not a JSON object is one error naming it."""
    path = Path(path)
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "not found"
        raise FileNotFoundError(f"--data {str(path)!r} {what}; pass a JSONL file, one example per line")
    records = []
    with open(path, encoding="utf-8", errors="strict") as f:
        try:
            lines = list(f)
        except UnicodeDecodeError:
            raise ValueError(f"{path} is not UTF-8 text; write the examples as UTF-8 JSON lines") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n}: not JSON ({exc.msg}); each line must be one JSON object") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{n}: a JSON {type(record).__name__}, not an object; write one record per line")
        records.append((n, record))
    if not records:
        raise ValueError(f"{path} holds no examples; write one JSON record per line")
    return records


def encode_records(records, fmt: ChatFormat, block_size: int, where: str = "record") -> list[Encoded]:
    """Each record as ids and a loss mask; the first bad one is one error naming it (``file:line`` or its index).

    ``records``: ``(line, record)`` pairs from :func:`read_records`, or plain
    records (counted from 1).  An empty assistant reply, an unknown role, a
    missing key or a conversation longer than ``block_size + 1`` tokens are refused.
    """
    out = []
    for i, item in enumerate(records, 1):
        n, record = item if isinstance(item, tuple) else (i, item)
        try:
            out.append(fmt.encode(_messages(record), block_size))
        except ValueError as exc:
            raise ValueError(f"{where}:{n}: {exc}") from None
    return out


def _messages(record) -> list[dict]:
    if not isinstance(record, dict):
        raise ValueError(f'a record must be an object with "messages" or "prompt" and "response", not {record!r:.60}')
    if "messages" not in record and ("prompt" in record) != ("response" in record):
        missing = "response" if "prompt" in record else "prompt"
        raise ValueError(f'the record has no "{missing}"; give both "prompt" and "response", or "messages"')
    for key in ("prompt", "response"):
        if "messages" not in record and key in record and not isinstance(record[key], str):
            raise ValueError(f'"{key}" must be text, got {type(record[key]).__name__}')
    return as_messages(record)


def split_examples(examples: list, val_fraction: float, seed: int) -> tuple[list, list]:
    """A seeded shuffle, then the last ``val_fraction`` (at least one example when it is > 0) held out."""
    if not 0 <= val_fraction < 1:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    order = list(range(len(examples)))
    random.Random(seed).shuffle(order)
    n_val = max(1, round(val_fraction * len(examples))) if val_fraction > 0 else 0
    if len(examples) - n_val < 1:
        raise ValueError(f"{len(examples)} example(s) leave none to train on; give more examples or val_fraction 0")
    cut = len(order) - n_val
    return [examples[i] for i in order[:cut]], [examples[i] for i in order[cut:]]


class ChatExamples(Dataset):
    """Encoded conversations as fixed-length ``(x, y)`` pairs: inputs padded with ``<|end|>``, targets with IGNORE.

    ``length``: the padded length T (default: the longest example's inputs).
    ``corpus_sha256`` names the examples' ids and masks, so a resumed run can
    check it trains on the same examples (as a pretraining run checks its text).
    """

    def __init__(self, examples: list[Encoded], fmt: ChatFormat, length: int = 0):
        if not examples:
            raise ValueError("no examples to train on")
        longest = max(len(e.ids) - 1 for e in examples)
        T = length or longest
        if T < longest:
            raise ValueError(f"length {T} is shorter than the longest example ({longest} inputs)")
        self.x = torch.full((len(examples), T), fmt.end_id, dtype=torch.long)  # (N, T)
        self.y = torch.full((len(examples), T), IGNORE, dtype=torch.long)  # (N, T)
        for i, e in enumerate(examples):
            x, y = e.tensors()
            self.x[i, : len(x)], self.y[i, : len(y)] = x, y
        digest = hashlib.sha256()
        for e in examples:
            digest.update(json.dumps([e.ids, e.mask]).encode())
        self.corpus_sha256 = digest.hexdigest()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]

    @property
    def counted_tokens(self) -> int:
        """Target positions the loss counts: the assistant's tokens."""
        return int((self.y != IGNORE).sum())

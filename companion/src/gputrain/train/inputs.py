"""What a run trains on (chapter 6): the text, its byte-token windows, and a resumable data order.

``load_text`` reads the corpus ``TrainConfig.data`` names (Python's own
source, local files, or a Hugging Face dataset), ``build_data`` cuts it into
train and validation windows, and :class:`EpochSampler` makes the order a
pure function of (seed, epoch) so a resumed run sees the same batches.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Callable, Iterator, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Sampler

from ..data import ByteTokenizer, TokenDataset, python_corpus, read_text_files, split_tokens
from ..results import first_line
from .config import TrainConfig, data_source
from .step import Batch

if TYPE_CHECKING:  # annotations only: the Accelerator is passed in
    from accelerate import Accelerator


def load_text(cfg: TrainConfig) -> str:
    """The training text: the stdlib corpus, local files, or a Hugging Face dataset's text column."""
    source = data_source(cfg)
    if source == "stdlib":
        return python_corpus(max_bytes=cfg.corpus_bytes)
    if isinstance(source, list):
        return read_text_files(source, max_bytes=cfg.corpus_bytes)
    import datasets  # optional: the hf extra

    name, _, split = source[3:].partition(":")
    try:
        ds = datasets.load_dataset(name, split=split or "train")
    except (ValueError, OSError) as exc:  # unknown split, no such dataset, offline: one line, not a traceback
        raise ValueError(
            f"data={cfg.data!r}: Hugging Face datasets could not load it ({first_line(exc)}); "
            "check the name and split, or pass local files"
        ) from None
    column = "text" if "text" in ds.column_names else ds.column_names[0]
    parts, total = [], 0
    for row in ds:
        parts.append(str(row[column]))
        total += len(parts[-1].encode("utf-8")) + 1
        if total >= cfg.corpus_bytes:
            break
    return "\n".join(parts).encode("utf-8")[: cfg.corpus_bytes].decode("utf-8", errors="ignore")


def build_data(cfg: TrainConfig) -> tuple[TokenDataset, TokenDataset]:
    """Byte tokens of the text, split into train and validation windows of ``cfg.window`` tokens."""
    text = load_text(cfg)
    if not text:
        raise ValueError(f"the corpus from data={cfg.data!r} is empty; point --data at files with text in them")
    check_text(text, cfg)
    tokens = ByteTokenizer.encode_tensor(text)  # (N,) one token per UTF-8 byte
    train_tokens, val_tokens = split_tokens(tokens, cfg.val_fraction)
    need = cfg.window + 1
    for name, part, fraction in (("training", train_tokens, "smaller"), ("validation", val_tokens, "larger")):
        if len(part) < need:
            raise ValueError(
                f"the {name} split has {len(part)} tokens, fewer than one window of {need}; "
                f"use more text, a {fraction} val_fraction (now {cfg.val_fraction}), or a smaller seq_len"
            )
    return TokenDataset(train_tokens, cfg.window), TokenDataset(val_tokens, cfg.window)


# Shares of bytes that are not UTF-8: above the first --data is refused as not text (a binary file), above
# the second a warning is printed (a few files in another encoding); below it is noise (the stdlib has some)
MAX_INVALID_UTF8, WARN_INVALID_UTF8 = 0.01, 0.001


def check_text(text: str, cfg: TrainConfig) -> None:
    """Refuse text that is not UTF-8 (a binary file); warn when a noticeable share of its bytes is not.

    The readers replace each invalid byte with U+FFFD, so counting those counts
    the invalid bytes (the three bytes each U+FFFD encodes to stand for one).
    """
    bad = text.count("\ufffd")
    if not bad:
        return
    share = bad / max(1, len(text.encode("utf-8")) - 2 * bad)
    if share > MAX_INVALID_UTF8:
        worst = _least_text(cfg)
        raise ValueError(
            f"data={cfg.data!r} does not look like text: {share:.0%} of its bytes are not valid UTF-8"
            f"{worst}; pass text files (UTF-8), not binaries"
        )
    if share > WARN_INVALID_UTF8:
        print(
            f"gputrain: warning: {share:.2%} of the bytes of data={cfg.data!r} are not valid UTF-8; "
            "each trains as the replacement character U+FFFD",
            file=sys.stderr,
            flush=True,
        )


def _least_text(cfg: TrainConfig) -> str:
    """`` (most of all in 'x.bin')``: the data file with the largest share of invalid bytes, when files were given."""
    source = data_source(cfg)
    if not isinstance(source, list):
        return ""

    def invalid(path) -> float:
        data = path.read_bytes()[: cfg.corpus_bytes]
        return data.decode("utf-8", errors="replace").count("\ufffd") / max(1, len(data))

    worst = max(source, key=invalid)
    return f" (most of all in {str(worst)!r})" if len(source) > 1 else ""


class EpochSampler(Sampler[int]):
    """A fresh permutation each epoch, computed from ``(seed, epoch)`` alone (chapter 6).

    The data order is then a pure function of the position (epoch, batch), so
    a resumed run sees exactly the batches the uninterrupted one would have.
    Accelerate calls :meth:`set_epoch` through its prepared loader.
    """

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return iter(torch.randperm(self.n, generator=g).tolist())


def endless_batches(loader, accelerator: Accelerator, epoch: int, skip: int) -> Iterator[tuple[int, int, Batch]]:
    """Endless ``(epoch, batches done in that epoch, batch)``, starting at a saved position."""
    while True:
        loader.set_epoch(epoch)
        it = accelerator.skip_first_batches(loader, skip) if skip else loader
        for i, batch in enumerate(it, start=skip + 1):
            yield epoch, i, batch
        epoch, skip = epoch + 1, 0


class WithLoss(nn.Module):
    """Wraps a model that returns logits into the ``model(x, y) -> (logits, loss)`` form :func:`train` expects.

    Chapter 6 trains a digit classifier through it.
    """

    def __init__(self, model: nn.Module, loss_fn: Callable = F.cross_entropy):
        super().__init__()
        self.model, self.loss_fn = model, loss_fn

    def forward(self, x: torch.Tensor, y: Optional[torch.Tensor] = None):
        logits = self.model(x)  # (B, classes)
        return logits, None if y is None else self.loss_fn(logits, y)

"""What a run trains on (chapter 6): the corpus's tokens, its windows, and a resumable data order.

``load_tokens`` tokenizes the corpus ``TrainConfig.data`` names (Python's own
source, local files, or a Hugging Face dataset) once into a compact,
memory-mapped cache file (:mod:`gputrain.data.tokens`); ``build_data`` cuts
the tokens into train and validation windows, each read from that file with
one ``pread`` (so the corpus never counts as the run's resident memory), and
says in one line how many bytes and tokens each side gets; :class:`EpochSampler` makes the order a pure
function of (seed, epoch) so a resumed run sees the same batches.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Sampler

from ..data import ByteTokenizer, TextSource, TokenDataset, TokenFile, split_tokens, stdlib_files, tokenize_source
from ..data.tokens import default_cache_dir
from ..results import first_line
from .config import STDLIB_DEFAULT_BYTES, TrainConfig, data_source
from .step import Batch

if TYPE_CHECKING:  # annotations only: the Accelerator is passed in
    from accelerate import Accelerator


def corpus_cap(cfg: TrainConfig) -> Optional[int]:
    """Bytes of text a run reads: ``corpus_bytes``, or all of the data (the stdlib: its first 400,000)."""
    if cfg.corpus_bytes:
        return cfg.corpus_bytes
    return STDLIB_DEFAULT_BYTES if cfg.data == "stdlib" else None


def text_source(cfg: TrainConfig) -> TextSource:
    """Where the run's text comes from, with its byte cap (a Hugging Face dataset is opened here)."""
    source, cap = data_source(cfg), corpus_cap(cfg)
    if source == "stdlib":
        files = stdlib_files()
        return TextSource("stdlib", files, max_bytes=cap, identity={"stdlib": str(files[0].parent)})
    if isinstance(source, list):
        label = source[0].name if len(source) == 1 else f"{source[0].name}+{len(source) - 1}"
        return TextSource(label, source, max_bytes=cap, identity={"files": [str(p.resolve()) for p in source]})
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
    return TextSource(
        source,
        rows=lambda: (row[column] for row in ds),
        max_bytes=cap,
        identity={"hf": str(Path(name).resolve()) if Path(name).exists() else name, "split": split, "column": column},
        fingerprint=getattr(ds, "_fingerprint", None),
    )


def load_text(cfg: TrainConfig) -> str:
    """The training text as one string: the stdlib corpus, local files, or a Hugging Face dataset's text column."""
    return b"".join(text_source(cfg).blocks()).decode("utf-8")


def cache_dir(cfg: TrainConfig) -> Optional[Path]:
    """Where tokenized data is kept: ``cfg.cache_dir``, the default cache, or None (``'none'``: memory only)."""
    if cfg.cache_dir == "none":
        return None
    return Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir()


def load_tokens(cfg: TrainConfig, notice: Callable[[str], None] = None) -> tuple[TextSource, TokenFile]:
    """The corpus as byte tokens (uint8), memory-mapped from the token cache; a notice goes to stderr."""
    source = text_source(cfg)
    say = notice or (lambda message: print(f"gputrain: {message}", file=sys.stderr, flush=True))
    return source, tokenize_source(source, ByteTokenizer(), cache_dir(cfg), say)


def build_data(cfg: TrainConfig, say: Optional[Callable[[str], None]] = None) -> tuple[TokenDataset, TokenDataset]:
    """Byte tokens of the text, split into train and validation windows of ``cfg.window`` tokens.

    ``say`` (if given) gets one line naming the bytes and tokens each split holds.
    """
    source, corpus = load_tokens(cfg)
    if not len(corpus.tokens):
        raise ValueError(f"the corpus from data={cfg.data!r} is empty; point --data at files with text in them")
    invalid = check_text(corpus, cfg)
    train_tokens, val_tokens = split_tokens(corpus.tokens, cfg.val_fraction)  # views: no copy of the corpus
    need = cfg.window + 1
    for name, part, fraction in (("training", train_tokens, "smaller"), ("validation", val_tokens, "larger")):
        if len(part) < need:
            raise ValueError(
                f"the {name} split has {len(part)} tokens, fewer than one window of {need}; "
                f"use more text, a {fraction} val_fraction (now {cfg.val_fraction}), or a smaller seq_len"
            )
    file = corpus.path  # windows are read from it with pread (None: tokens in memory only)
    train_set = TokenDataset(train_tokens, cfg.window, file)
    val_set = TokenDataset(val_tokens, cfg.window, file, first=len(train_tokens))
    train_set.corpus_sha256 = val_set.corpus_sha256 = corpus.sha256  # a checkpoint records which text it was
    if say:
        say(data_line(cfg, source, corpus, train_set, val_set, invalid))
    return train_set, val_set


def _short(path: Path) -> str:
    """``path`` with the home directory written ``~``."""
    home = Path.home()
    return f"~/{path.relative_to(home)}" if path.is_relative_to(home) else str(path)


def data_line(cfg: TrainConfig, source: TextSource, corpus: TokenFile, train_set, val_set, invalid: int = 0) -> str:
    """One line: how much of the data a run reads, its tokens, and what it trains and validates on.

    ``invalid`` counts the U+FFFD characters in the text (:func:`check_text`): where reading files changed
    their bytes (invalid UTF-8 replaced, CRLF folded), the line gives the size on disk and each change.
    """
    on_disk = source.input_bytes()
    if corpus.capped:
        why = "capped by corpus_bytes" if cfg.corpus_bytes else "the stdlib default; a larger corpus_bytes reads more"
        read = f"the first {corpus.n_bytes:,} bytes of {source.label} ("
        read += f"{on_disk:,} on disk; {why})" if on_disk is not None else f"{why})"
    elif on_disk is not None and on_disk != corpus.n_bytes:
        changes = [
            f"{n:,} {what}"
            for n, what in (
                (source.crlf, "CRLF line endings read as LF"),
                (source.lone_cr, "CR line endings read as LF"),
                (invalid, "invalid UTF-8 sequences read as the 3-byte U+FFFD"),
            )
            if n
        ]
        read = f"all {on_disk:,} bytes of {source.label} as {corpus.n_bytes:,} bytes of text ({', '.join(changes)})"
    else:
        read = f"all {corpus.n_bytes:,} bytes of {source.label}"
    kept = "in memory" if corpus.path is None else f"cache {corpus.status}: {_short(corpus.path)}"
    dtype = str(corpus.tokens.dtype).replace("torch.", "")
    T = cfg.window
    return (
        f"data: {read} -> {len(corpus.tokens):,} tokens ({dtype}, {kept}); "
        f"training on {len(train_set.tokens):,} tokens ({len(train_set):,} windows of {T}), "
        f"validating on {len(val_set.tokens):,} ({len(val_set):,} windows)"
    )


# Shares of bytes that are not UTF-8: above the first --data is refused as not text (a binary file), above
# the second a warning is printed (a few files in another encoding); below it is noise (the stdlib has some)
MAX_INVALID_UTF8, WARN_INVALID_UTF8 = 0.01, 0.001


REPLACEMENT = "\ufffd".encode()  # EF BF BD: what the readers put in place of each invalid byte


def token_bytes(corpus: TokenFile, chunk: int = 1 << 20) -> Iterator[bytes]:
    """A byte corpus's tokens as bytes, ``chunk`` at a time.

    From its cache file when it has one (the tokens lead the file): read, not
    touched through the run's memory map, so the pages a scan reads stay out
    of the run's resident memory until a batch needs them (8 MB of an 8 MB
    corpus otherwise).  From the tensor when the tokens are held in memory.
    """
    n = len(corpus.tokens)
    if corpus.path is None or corpus.tokens.dtype != torch.uint8:
        data = corpus.tokens.to(torch.uint8).numpy()
        yield from (data[start : start + chunk].tobytes() for start in range(0, n, chunk))
        return
    with open(corpus.path, "rb") as f:
        while n > 0 and (block := f.read(min(chunk, n))):
            n -= len(block)
            yield block


def invalid_utf8_share(blocks: Iterable[bytes]) -> float:
    """Share of a byte corpus (its consecutive ``blocks``) that was not valid UTF-8, counted as U+FFFD sequences."""
    bad, n = invalid_utf8_count(blocks)
    return bad / max(1, n - 2 * bad)


def invalid_utf8_count(blocks: Iterable[bytes]) -> tuple[int, int]:
    """``(U+FFFD sequences, bytes)`` of a byte corpus given as its consecutive ``blocks``.

    The readers replace each invalid byte with U+FFFD (three bytes), so the
    count of replacements is the count of invalid bytes.  ``bytes.count``
    scans a block at memory speed, where three tensor comparisons would take a
    tenth of a second of every run's start on 8 MB.
    """
    bad, n, tail = 0, 0, b""
    for block in blocks:
        # the last two bytes of the block before lead this one: a sequence may straddle blocks, and none fits
        # in two bytes, so each is counted once, in the block where it ends
        bad += (tail + block).count(REPLACEMENT)
        n, tail = n + len(block), (tail + block)[-2:]
    return bad, n


def check_text(corpus: TokenFile, cfg: TrainConfig) -> int:
    """Refuse a corpus that is not UTF-8 text (a binary file); warn when a noticeable share of its bytes is not.

    Returns the number of U+FFFD characters the text holds (each an invalid sequence replaced).
    """
    bad, n = invalid_utf8_count(token_bytes(corpus))
    share = bad / max(1, n - 2 * bad)
    if not share:
        return 0
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
    return bad


def _least_text(cfg: TrainConfig) -> str:
    """`` (most of all in 'x.bin')``: the data file with the largest share of invalid bytes, when files were given."""
    source = data_source(cfg)
    if not isinstance(source, list):
        return ""

    def invalid(path) -> float:
        data = path.read_bytes()[: corpus_cap(cfg)]  # None (no cap) reads it all
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

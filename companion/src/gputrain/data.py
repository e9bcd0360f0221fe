"""Data: turning the world into numbers (chapter 1).

Everything here works offline.  The text corpus is the Python standard
library's own source code, which every Python installation carries; the
tokenizer at its simplest is the identity on UTF-8 bytes.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path
from typing import Iterator, Optional

import torch
from torch.utils.data import Dataset


def stdlib_files() -> list[Path]:
    """The ``.py`` files of this interpreter's standard library, in a fixed order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts)
    if not files:
        raise FileNotFoundError(
            f"no .py files under {root}; this Python ships without its sources, "
            "so pass your own text files instead (data.read_text_files)"
        )
    return files


def read_text_files(paths: list[Path], max_bytes: Optional[int] = None) -> str:
    """Concatenate text files (UTF-8, undecodable bytes replaced), up to ``max_bytes``."""
    parts, total = [], 0
    for path in paths:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        parts.append(text)
        total += len(text.encode("utf-8"))
        if max_bytes is not None and total >= max_bytes:
            break
    text = "".join(parts)
    if max_bytes is not None:
        text = text.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")
    return text


def python_corpus(max_bytes: Optional[int] = 2_000_000) -> str:
    """The standard library's source as one string (the book's offline text corpus)."""
    return read_text_files(stdlib_files(), max_bytes=max_bytes)


class ByteTokenizer:
    """The simplest tokenizer: one token per UTF-8 byte, vocabulary 256.

    Lossless on any Unicode text; chapter 1 builds a byte-level BPE on top of it.
    """

    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")


class TokenDataset(Dataset):
    """Non-overlapping windows of a token stream as next-token pairs.

    Item ``i`` is ``(x, y)`` with ``x = tokens[i*T : i*T+T]`` and ``y`` the same
    window shifted by one: the target at every position is the next token.
    """

    def __init__(self, tokens: torch.Tensor, block_size: int):
        if tokens.dim() != 1:
            raise ValueError(f"tokens must be 1-D, got shape {tuple(tokens.shape)}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        if len(tokens) < block_size + 1:
            raise ValueError(
                f"{len(tokens)} tokens cannot make one window of {block_size}+1; "
                "use more text or a smaller block_size"
            )
        self.tokens = tokens.long()
        self.block_size = block_size

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.block_size

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= i < len(self):
            raise IndexError(i)
        start = i * self.block_size
        chunk = self.tokens[start : start + self.block_size + 1]
        return chunk[:-1], chunk[1:]  # (T,), (T,)


def split_tokens(tokens: torch.Tensor, val_fraction: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """Split a token stream into a leading train part and a trailing validation part."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    n_val = max(1, int(len(tokens) * val_fraction))
    return tokens[:-n_val], tokens[-n_val:]


def infinite(loader) -> Iterator:
    """Cycle through a DataLoader forever (a new shuffle each pass)."""
    while True:
        yield from loader

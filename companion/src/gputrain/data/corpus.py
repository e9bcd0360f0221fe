"""The offline text corpus, exact de-duplication and leak-free splits (chapter 1).

The corpus is the Python standard library's own source code, which every
Python installation carries, so nothing is downloaded.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import sysconfig
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import torch


def stdlib_files() -> list[Path]:
    """The ``.py`` files of this interpreter's standard library, in a fixed order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [] if "site-packages" in root.parts else sorted(_python_files(root))
    if not files:
        raise FileNotFoundError(
            f"no .py files under {root}; this Python ships without its sources, "
            "so pass your own text files instead (data.read_text_files)"
        )
    return files


def _python_files(root: Path) -> Iterator[Path]:
    """``root.rglob("*.py")`` without walking into ``site-packages``: installed packages can hold
    ten times the standard library's files, and every training run lists the corpus."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "site-packages"]
        for name in (*dirs, *files):  # rglob matches directories named *.py too
            if fnmatch.fnmatch(name, "*.py"):
                yield Path(folder, name)


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


@dataclass
class DedupReport:
    """What exact de-duplication found: counts, bytes, and the largest groups."""

    n_items: int  # items looked at
    n_unique: int  # distinct contents kept (first occurrence of each)
    n_duplicates: int  # items dropped because an identical one came earlier
    total_bytes: int  # UTF-8 bytes of all items
    duplicate_bytes: int  # UTF-8 bytes of the dropped items
    groups: list[tuple[int, int]] = field(repr=False)  # (copies, index of first copy), largest first


def dedup_exact(items: Sequence[str], key: Optional[Callable[[str], str]] = None) -> tuple[list[int], DedupReport]:
    """Indices of the first occurrence of every distinct item, and a report of what was dropped.

    Two items are duplicates when their SHA-256 digests agree (of ``key(item)``
    when a key is given, e.g. ``str.strip`` for lines).  Chapter 1 counts the
    duplicates in the standard library with it.
    """
    first: dict[bytes, int] = {}
    copies: Counter = Counter()
    keep, dup_bytes, total = [], 0, 0
    for i, item in enumerate(items):
        raw = item.encode("utf-8")
        total += len(raw)
        digest = hashlib.sha256((key(item) if key else item).encode("utf-8")).digest()
        copies[digest] += 1
        if digest in first:
            dup_bytes += len(raw)
        else:
            first[digest] = i
            keep.append(i)
    groups = sorted(((c, first[d]) for d, c in copies.items() if c > 1), key=lambda g: (-g[0], g[1]))
    report = DedupReport(
        n_items=len(items),
        n_unique=len(keep),
        n_duplicates=len(items) - len(keep),
        total_bytes=total,
        duplicate_bytes=dup_bytes,
        groups=groups,
    )
    return keep, report


def _check_fractions(fractions: Sequence[float]) -> None:
    if not fractions or any(f < 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-9:
        raise ValueError(f"split fractions must be >= 0 and sum to 1, got {tuple(fractions)}")


def split_indices(
    keys: Sequence[str], fractions: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 0, method: str = "hash"
) -> list[list[int]]:
    """Deterministic split of items (e.g. train/val/test) into lists of indices.

    ``method="hash"`` puts item ``i`` in a bucket chosen by the SHA-256 of
    ``seed`` and ``keys[i]``: the same key always lands in the same split, so
    exact duplicates cannot straddle train and test, and adding items never
    moves old ones.  ``method="permutation"`` shuffles the indices with a
    seeded generator and cuts them at the fractions.  Chapter 1.
    """
    _check_fractions(fractions)
    bounds = [sum(fractions[: k + 1]) for k in range(len(fractions))]
    parts: list[list[int]] = [[] for _ in fractions]
    if method == "hash":
        for i, k in enumerate(keys):
            h = hashlib.sha256(f"{seed}\0{k}".encode("utf-8")).digest()
            u = int.from_bytes(h[:8], "big") / 2**64  # uniform in [0, 1)
            parts[next(b for b, edge in enumerate(bounds) if u < edge or b == len(bounds) - 1)].append(i)
    elif method == "permutation":
        order = torch.randperm(len(keys), generator=torch.Generator().manual_seed(seed)).tolist()
        cuts = [0] + [round(b * len(keys)) for b in bounds]
        cuts[-1] = len(keys)
        for b in range(len(fractions)):
            parts[b] = sorted(order[cuts[b] : cuts[b + 1]])
    else:
        raise ValueError(f"method must be 'hash' or 'permutation', got {method!r}")
    return parts


def sample_text(docs: Sequence[str], max_bytes: int, seed: int = 0) -> str:
    """Whole documents in a seeded random order, joined up to ``max_bytes`` UTF-8 bytes.

    A sample of many files rather than the first files in alphabetical order,
    which would over-represent whichever module happens to sort first.
    """
    parts, total = [], 0
    for i in torch.randperm(len(docs), generator=torch.Generator().manual_seed(seed)).tolist():
        if total >= max_bytes:
            break
        parts.append(docs[i])
        total += len(docs[i].encode("utf-8"))
    return "".join(parts).encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")

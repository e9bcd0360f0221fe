"""Data: turning the world into numbers (chapter 1).

Everything here works offline.  The text corpus is the Python standard
library's own source code, which every Python installation carries; the
images are the two photos scikit-learn ships; the small labelled data set is
scikit-learn's 8x8 handwritten digits.  Sections, in the chapter's order:

1. corpus: files, text, exact de-duplication, deterministic splits
2. images: photo -> (C, H, W) tensor, resize, normalisation, batch augmentation
3. text -> token IDs: the byte tokenizer and a byte-level BPE trained from scratch
4. token datasets and loaders that yield shifted (x, y) pairs
5. digits in shuffled or class-sorted order, and training in that order
6. measuring a loader's throughput against a model's step time
"""

from __future__ import annotations

import hashlib
import heapq
import io
import json
import math
import re
import sysconfig
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

# --- 1. corpus ---------------------------------------------------------------


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
    report = DedupReport(n_items=len(items), n_unique=len(keep), n_duplicates=len(items) - len(keep),
                         total_bytes=total, duplicate_bytes=dup_bytes, groups=groups)
    return keep, report


def _check_fractions(fractions: Sequence[float]) -> None:
    if not fractions or any(f < 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-9:
        raise ValueError(f"split fractions must be >= 0 and sum to 1, got {tuple(fractions)}")


def split_indices(keys: Sequence[str], fractions: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 0,
                  method: str = "hash") -> list[list[int]]:
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
            parts[b] = sorted(order[cuts[b]:cuts[b + 1]])
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


# --- 2. images ---------------------------------------------------------------


def _sklearn(what: str):
    try:
        import sklearn.datasets
    except ImportError as e:  # scikit-learn is in the [book] extra, not a core dependency
        raise ImportError(f"{what} needs scikit-learn: pip install scikit-learn (or gputrain[book])") from e
    return sklearn.datasets


def sample_image_files() -> list[Path]:
    """Paths of the JPEG photos scikit-learn ships (``china.jpg``, ``flower.jpg``)."""
    return [Path(f) for f in _sklearn("sample_image_files").load_sample_images().filenames]


def to_tensor(image) -> torch.Tensor:
    """An (H, W, C) image (NumPy array or PIL image) as a (C, H, W) tensor, same dtype and values."""
    t = torch.from_numpy(np.array(image))  # a copy: the caller's array stays untouched
    if t.dim() != 3:
        hint = ("for a grayscale image add a channel axis first (img[..., None])" if t.dim() == 2 else
                "that is a batch: convert each image and torch.stack them" if t.dim() == 4 else
                "pass one image of shape (H, W, C)")
        raise ValueError(f"an image needs 3 dimensions (H, W, C), got shape {tuple(t.shape)}; {hint}")
    return t.permute(2, 0, 1).contiguous()  # (H, W, C) -> (C, H, W): channels first, as PyTorch expects


def sample_image(name: str = "china.jpg") -> torch.Tensor:
    """One of scikit-learn's sample photos as a (3, H, W) uint8 tensor."""
    names = [p.name for p in sample_image_files()]
    if name not in names:
        raise ValueError(f"no sample image {name!r}; choose one of {names}")
    images = _sklearn("sample_image").load_sample_images().images
    return to_tensor(images[names.index(name)])


def decode_jpeg(data: bytes) -> torch.Tensor:
    """JPEG (or any format Pillow reads) bytes -> (3, H, W) uint8 tensor."""
    from PIL import Image  # Pillow comes with matplotlib

    return to_tensor(Image.open(io.BytesIO(data)).convert("RGB"))


def _check_image(x: torch.Tensor, batch: bool = False) -> None:
    want = (4,) if batch else (3, 4)
    if x.dim() not in want:
        shape = "(B, C, H, W)" if batch else "(C, H, W) or (B, C, H, W)"
        hint = " add a batch axis with x[None]" if batch and x.dim() == 3 else ""
        raise ValueError(f"expected an image tensor of shape {shape}, got shape {tuple(x.shape)};{hint or ' convert with data.to_tensor'}")


def resize(x: torch.Tensor, size: int | tuple[int, int]) -> torch.Tensor:
    """Bilinear resize with antialiasing (as Pillow does) to ``size`` = (H, W) or a square side.

    Works on (C, H, W) or (B, C, H, W); uint8 in, uint8 out (rounded).
    """
    _check_image(x)
    hw = (size, size) if isinstance(size, int) else tuple(size)
    batch = (x[None] if x.dim() == 3 else x).float()  # interpolate needs floats: (B, C, H, W)
    y = F.interpolate(batch, size=hw, mode="bilinear", antialias=True, align_corners=False)
    if not x.is_floating_point():  # round back so uint8 stays uint8
        y = y.round().clamp(0, 255).to(x.dtype)
    return y[0] if x.dim() == 3 else y


def resize_shorter(x: torch.Tensor, side: int) -> torch.Tensor:
    """Resize so the shorter side is ``side`` pixels, keeping the aspect ratio."""
    _check_image(x)
    h, w = x.shape[-2:]
    scale = side / min(h, w)
    return resize(x, (max(side, round(h * scale)), max(side, round(w * scale))))


def center_crop(x: torch.Tensor, size: int) -> torch.Tensor:
    """The central ``size`` x ``size`` window of (..., H, W)."""
    h, w = x.shape[-2:]
    if size > min(h, w):
        raise ValueError(f"crop of {size} is larger than the image ({h}x{w}); resize first")
    top, left = (h - size) // 2, (w - size) // 2
    return x[..., top:top + size, left:left + size]


def minmax(x: torch.Tensor, dims: Optional[tuple[int, ...]] = None) -> torch.Tensor:
    """Min-max scaling to [0, 1] over ``dims`` (all dims by default); a constant input maps to 0."""
    x = x.float()
    dims = tuple(range(x.dim())) if dims is None else dims
    lo, hi = x.amin(dim=dims, keepdim=True), x.amax(dim=dims, keepdim=True)
    return (x - lo) / (hi - lo).clamp_min(torch.finfo(x.dtype).tiny)


def channel_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and (population) std of (C, H, W) or (B, C, H, W), as (C,) tensors."""
    _check_image(x)
    x = x.float()
    dims = (1, 2) if x.dim() == 3 else (0, 2, 3)
    return x.mean(dim=dims), x.std(dim=dims, correction=0)


def standardize(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """(x - mean) / std per channel of (C, H, W) or (B, C, H, W): zero mean, unit spread."""
    _check_image(x)
    return (x.float() - mean.view(-1, 1, 1)) / std.view(-1, 1, 1)  # (C,) -> (C, 1, 1) broadcasts


def _rand(n: int, generator: Optional[torch.Generator]) -> torch.Tensor:
    return torch.rand(n, generator=generator)  # drawn on the CPU so a CPU generator seeds GPU batches too


def random_flip(x: torch.Tensor, p: float = 0.5, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Mirror each image of a (B, C, H, W) batch left-right with probability ``p``."""
    _check_image(x, batch=True)
    flip = (_rand(x.shape[0], generator) < p).to(x.device).view(-1, 1, 1, 1)  # (B, 1, 1, 1)
    return torch.where(flip, x.flip(-1), x)


def random_crop(x: torch.Tensor, size: int, padding: int = 0,
                generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """A random ``size`` x ``size`` window per image of a (B, C, H, W) batch (after zero ``padding``)."""
    _check_image(x, batch=True)
    if padding:
        x = F.pad(x, (padding,) * 4)
    B, C, H, W = x.shape
    if size > min(H, W):
        raise ValueError(f"crop of {size} is larger than the images ({H}x{W}); resize first")
    top = (_rand(B, generator) * (H - size + 1)).long().to(x.device)  # (B,)
    left = (_rand(B, generator) * (W - size + 1)).long().to(x.device)  # (B,)
    ar = torch.arange(size, device=x.device)
    rows = (top[:, None] + ar).view(B, 1, size, 1)  # (B, 1, S, 1)
    cols = (left[:, None] + ar).view(B, 1, 1, size)  # (B, 1, 1, S)
    b = torch.arange(B, device=x.device).view(B, 1, 1, 1)
    c = torch.arange(C, device=x.device).view(1, C, 1, 1)
    return x[b, c, rows, cols]  # (B, C, S, S): one gather, no Python loop over images


def rotate(x: torch.Tensor, degrees: torch.Tensor | float) -> torch.Tensor:
    """Rotate each image of a (B, C, H, W) batch counter-clockwise about its centre (bilinear, zero fill)."""
    _check_image(x, batch=True)
    B, _, H, W = x.shape
    theta = torch.as_tensor(degrees, dtype=torch.float32).expand(B).to(x.device) * math.pi / 180
    cos, sin = torch.cos(theta), torch.sin(theta)
    # affine_grid works in [-1, 1] coordinates; scale by the aspect ratio so a
    # non-square image rotates rigidly instead of shearing.
    a = torch.stack([torch.stack([cos, -sin * H / W, torch.zeros_like(cos)], -1),
                     torch.stack([sin * W / H, cos, torch.zeros_like(cos)], -1)], 1)  # (B, 2, 3)
    grid = F.affine_grid(a, list(x.shape), align_corners=False)  # (B, H, W, 2)
    out = F.grid_sample(x.float(), grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return out if x.is_floating_point() else out.round().clamp(0, 255).to(x.dtype)


def random_rotation(x: torch.Tensor, max_degrees: float, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Rotate each image by an angle drawn uniformly from [-max_degrees, max_degrees]."""
    _check_image(x, batch=True)
    return rotate(x, (_rand(x.shape[0], generator) * 2 - 1) * max_degrees)


def augment(x: torch.Tensor, size: int, generator: Optional[torch.Generator] = None,
            max_degrees: float = 15.0, padding: int = 0) -> torch.Tensor:
    """Flip, rotate, then crop a (B, C, H, W) batch to ``size``: the chapter's augmentation pipeline."""
    x = random_flip(x, generator=generator)
    x = random_rotation(x, max_degrees, generator=generator)
    return random_crop(x, size, padding=padding, generator=generator)


# --- 3. text -> token IDs ------------------------------------------------------


class ByteTokenizer:
    """The simplest tokenizer: one token per UTF-8 byte, vocabulary 256.

    Lossless on any Unicode text; chapter 1 builds a byte-level BPE on top of it.
    """

    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")


# Chunks a merge may not cross: runs of letters (and _), of digits, of other
# symbols, each with at most one leading space, and whitespace runs.  Every
# character falls in one class, so the chunks always join back to the text.
SPLIT_PATTERN = r" ?[^\W\d]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+"
BPE_FORMAT = "gputrain-byte-bpe"


def _pairs(ids: Sequence[int]) -> Iterator[tuple[int, int]]:
    return zip(ids, ids[1:])


def _merge(ids: list[int], pair: tuple[int, int], new: int) -> list[int]:
    """Replace every non-overlapping occurrence of ``pair`` (left to right) by ``new``."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


class BPETokenizer:
    """Byte-level byte-pair encoding, trained from scratch (chapter 1).

    The vocabulary starts as the 256 byte values, so any Unicode text encodes
    and decodes exactly; each merge adds one token standing for two adjacent
    tokens that were the most frequent pair in the training text (ties go to
    the smallest pair, so training is deterministic).  Merge ``k`` creates
    token ``256 + k``.  Saved as JSON, never pickle.
    """

    def __init__(self, merges: Sequence[tuple[int, int]] = (), pattern: str = SPLIT_PATTERN):
        self.merges: list[tuple[int, int]] = [(int(a), int(b)) for a, b in merges]
        self.pattern = pattern
        self._regex = re.compile(pattern)
        self.vocab: list[bytes] = [bytes([i]) for i in range(256)]
        for k, (a, b) in enumerate(self.merges):
            if not (0 <= a < 256 + k and 0 <= b < 256 + k):
                raise ValueError(f"merge {k} = ({a}, {b}) refers to a token that does not exist yet")
            self.vocab.append(self.vocab[a] + self.vocab[b])
        self._rank = {pair: k for k, pair in enumerate(self.merges)}
        self._cache: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        return 256 + len(self.merges)

    def chunks(self, text: str) -> list[str]:
        """The pre-tokenized pieces of ``text``; they always join back to ``text``."""
        parts = self._regex.findall(text)
        if sum(map(len, parts)) != len(text):
            raise ValueError("the split pattern drops characters; use data.SPLIT_PATTERN or one that matches everything")
        return parts

    @classmethod
    def train(cls, text: str, vocab_size: int, pattern: str = SPLIT_PATTERN) -> "BPETokenizer":
        """Learn ``vocab_size - 256`` merges from ``text`` (fewer if the text runs out of pairs).

        Counts each distinct chunk once with its frequency, then after every
        merge updates only the chunks that contain the merged pair; a heap with
        lazy deletion finds the most frequent pair.
        """
        if vocab_size < 256:
            raise ValueError(f"vocab_size={vocab_size} is below 256: a byte-level BPE starts from the "
                             "256 byte tokens; use vocab_size >= 256 (256 means plain bytes, no merges)")
        if not text:
            raise ValueError("cannot train a tokenizer on an empty corpus: pass some text, "
                             "e.g. data.python_corpus(max_bytes=300_000)")
        tok = cls(pattern=pattern)
        freq = Counter(tok.chunks(text))
        words = [list(w.encode("utf-8")) for w in freq]  # distinct chunks as byte lists
        counts = list(freq.values())
        pair_count: dict[tuple[int, int], int] = defaultdict(int)
        where: dict[tuple[int, int], set[int]] = defaultdict(set)  # pair -> chunks containing it
        for wi, w in enumerate(words):
            for p in _pairs(w):
                pair_count[p] += counts[wi]
                where[p].add(wi)
        heap = [(-c, p) for p, c in pair_count.items()]
        heapq.heapify(heap)
        merges: list[tuple[int, int]] = []
        while len(merges) < vocab_size - 256 and heap:
            neg, pair = heapq.heappop(heap)
            if pair_count.get(pair, 0) != -neg or neg == 0:
                continue  # stale heap entry: the count changed since it was pushed
            new = 256 + len(merges)
            merges.append(pair)
            changed = set()
            for wi in where.pop(pair):
                old = words[wi]
                for p in _pairs(old):  # take the chunk's old pairs out ...
                    pair_count[p] -= counts[wi]
                    changed.add(p)
                    where[p].discard(wi)
                words[wi] = _merge(old, pair, new)
                for p in _pairs(words[wi]):  # ... and its new pairs in
                    pair_count[p] += counts[wi]
                    changed.add(p)
                    where[p].add(wi)
            for p in changed:
                if pair_count[p] > 0:
                    heapq.heappush(heap, (-pair_count[p], p))
                else:
                    pair_count.pop(p, None)
        return cls(merges, pattern)

    def truncated(self, n_merges: int) -> "BPETokenizer":
        """The tokenizer with only the first ``n_merges`` merges (what training to a smaller vocab gives)."""
        return BPETokenizer(self.merges[:n_merges], self.pattern)

    def _encode_chunk(self, chunk: str) -> list[int]:
        ids = list(chunk.encode("utf-8"))
        while len(ids) > 1:
            # apply the earliest-learned merge present, exactly as training did
            pair = min(_pairs(ids), key=lambda p: self._rank.get(p, math.inf))
            if pair not in self._rank:
                break
            ids = _merge(ids, pair, 256 + self._rank[pair])
        return ids

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for chunk in self.chunks(text):
            ids = self._cache.get(chunk)
            if ids is None:
                ids = self._cache[chunk] = self._encode_chunk(chunk)
            out.extend(ids)
        return out

    def decode(self, ids: Iterable[int]) -> str:
        """Text of a token sequence; a sequence cut inside a character shows U+FFFD there."""
        return b"".join(self.vocab[int(i)] for i in ids).decode("utf-8", errors="replace")

    def save(self, path) -> None:
        Path(path).write_text(json.dumps({"format": BPE_FORMAT, "version": 1, "pattern": self.pattern,
                                          "merges": self.merges}) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path) -> "BPETokenizer":
        spec = json.loads(Path(path).read_text(encoding="utf-8"))
        if spec.get("format") != BPE_FORMAT or spec.get("version") != 1:
            raise ValueError(f"{path} is not a {BPE_FORMAT} v1 file; save it with BPETokenizer.save")
        return cls([tuple(m) for m in spec["merges"]], spec["pattern"])


def bytes_per_token(tokenizer, text: str) -> float:
    """Compression: UTF-8 bytes of ``text`` per token the tokenizer makes of it."""
    return len(text.encode("utf-8")) / max(1, len(tokenizer.encode(text)))


# --- 4. token datasets and loaders --------------------------------------------


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


def make_loader(dataset: Dataset, batch_size: int, *, shuffle: bool = True, drop_last: bool = False,
                seed: int = 0, num_workers: int = 0, pin_memory: bool = False) -> DataLoader:
    """A DataLoader with a seeded shuffle; ``pin_memory`` only takes effect when CUDA exists.

    Pinned (page-locked) host memory lets the copy to a GPU run asynchronously;
    without a GPU there is nothing to copy to, so it is switched off.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if drop_last and batch_size > len(dataset):
        raise ValueError(f"batch_size={batch_size} exceeds the {len(dataset)} samples of the dataset, so "
                         "drop_last=True would yield no batch at all; lower batch_size or set drop_last=False")
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last,
                      generator=torch.Generator().manual_seed(seed), num_workers=num_workers,
                      pin_memory=pin_memory and torch.cuda.is_available(),
                      persistent_workers=False)


def token_loader(tokens: torch.Tensor, block_size: int, batch_size: int, **kwargs) -> DataLoader:
    """Batches of shifted ``(x, y)`` pairs, each (B, T), from a 1-D token stream."""
    return make_loader(TokenDataset(tokens, block_size), batch_size, **kwargs)


def infinite(loader) -> Iterator:
    """Cycle through a DataLoader forever (a new shuffle each pass)."""
    while True:
        yield from loader


# --- 5. digits: shuffle or forget ----------------------------------------------


def digits() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's 1,797 handwritten digits: x (N, 64) float32 pixel values 0..16, y (N,) int64."""
    d = _sklearn("digits").load_digits()
    return torch.tensor(d.data, dtype=torch.float32), torch.tensor(d.target, dtype=torch.long)


def order_by(x: torch.Tensor, y: torch.Tensor, order: str, seed: int = 0,
             epochs: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """The stream of ``epochs`` passes over a labelled set, ``"shuffled"`` or class ``"sorted"``.

    ``"shuffled"``: every pass is a fresh seeded permutation, as a shuffling
    DataLoader gives.  ``"sorted"``: all passes over class 0 first, then all
    over class 1, and so on: ten thousand cats, then ten thousand dogs.  Both
    streams hold exactly the same examples the same number of times; only the
    order differs.  Chapter 1, "Shuffle or forget".
    """
    if order not in ("shuffled", "sorted"):
        raise ValueError(f"order must be 'shuffled' or 'sorted', got {order!r}")
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    g = torch.Generator().manual_seed(seed)
    passes = [torch.randperm(len(y), generator=g) for _ in range(epochs)]  # epochs x (N,)
    if order == "shuffled":
        idx = torch.cat(passes)
    else:
        idx = torch.cat([p[y[p] == c] for c in torch.unique(y).tolist() for p in passes])
    return x[idx], y[idx]


@torch.no_grad()
def per_class_accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, n_classes: int) -> torch.Tensor:
    """Accuracy on each class separately, a (n_classes,) tensor."""
    correct = (model(x).argmax(-1) == y).float()  # (N,)
    hits = torch.zeros(n_classes).index_add_(0, y, correct)
    return hits / torch.bincount(y, minlength=n_classes).clamp_min(1)


@dataclass
class OrderedRun:
    """Per-class test accuracy while a model trains on a stream in one fixed order."""

    steps: list[int]  # optimizer steps at each evaluation
    seen_class: list[int]  # label of the last training example seen at each evaluation
    accuracy: torch.Tensor  # (evaluations, classes) per-class test accuracy
    losses: list[float]  # training loss at every step


def train_in_order(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, x_test: torch.Tensor,
                   y_test: torch.Tensor, *, batch_size: int = 16, lr: float = 0.1,
                   eval_every: int = 5) -> OrderedRun:
    """Plain SGD over the stream ``(x, y)`` once, in exactly its order; per-class test accuracy as it goes.

    No shuffling happens here: the order (from :func:`order_by`) *is* the
    experiment (chapter 1, "Shuffle or forget").
    """
    n_classes = int(max(y.max(), y_test.max())) + 1
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    steps, seen, accs, losses, step = [0], [-1], [per_class_accuracy(model, x_test, y_test, n_classes)], [], 0
    for start in range(0, len(y), batch_size):
        xb, yb = x[start:start + batch_size], y[start:start + batch_size]  # (B, D), (B,)
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        step += 1
        if step % eval_every == 0 or start + batch_size >= len(y):
            steps.append(step)
            seen.append(int(yb[-1]))
            accs.append(per_class_accuracy(model, x_test, y_test, n_classes))
    return OrderedRun(steps=steps, seen_class=seen, accuracy=torch.stack(accs), losses=losses)


# --- 6. feeding the GPU: loader throughput -------------------------------------


class JpegImages(Dataset):
    """Images decoded from JPEG bytes on every access, resized, randomly cropped and flipped.

    The per-sample work a real image loader does (decode, resize, crop) in a
    worker process; item ``i`` uses JPEG ``i % len(jpegs)``.
    """

    def __init__(self, jpegs: Sequence[bytes], length: int, size: int = 224):
        if not jpegs:
            raise ValueError("JpegImages needs at least one JPEG; e.g. [p.read_bytes() for p in data.sample_image_files()]")
        self.jpegs, self.length, self.size = list(jpegs), length, size

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        img = resize_shorter(decode_jpeg(self.jpegs[i % len(self.jpegs)]), round(self.size * 8 / 7))
        img = random_crop(img[None], self.size)  # (1, 3, S, S); the worker's seeded RNG picks the window
        img = random_flip(img)[0]  # (3, S, S)
        return img, i % len(self.jpegs)


@dataclass
class LoaderStats:
    """How fast a DataLoader delivers (and optionally ships to a device) its batches."""

    batches: int  # batches timed
    samples: int  # samples in those batches
    seconds: float  # wall time, first batch included (worker start-up is part of the cost)

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds

    @property
    def seconds_per_batch(self) -> float:
        return self.seconds / self.batches


def loader_throughput(loader: DataLoader, max_batches: Optional[int] = None,
                      device: Optional[torch.device] = None) -> LoaderStats:
    """Iterate ``loader`` (up to ``max_batches``), copying each batch to ``device`` if given; time it."""
    import time

    from .device import synchronize

    t0, n, samples = time.perf_counter(), 0, 0
    for batch in loader:
        first = batch[0] if isinstance(batch, (list, tuple)) else batch
        if device is not None:
            first = first.to(device, non_blocking=True)
        samples += first.shape[0]
        n += 1
        if max_batches is not None and n >= max_batches:
            break
    if device is not None:
        synchronize(device)
    if n == 0:
        raise ValueError("the loader yielded no batch; check batch_size, drop_last and the dataset length")
    return LoaderStats(batches=n, samples=samples, seconds=time.perf_counter() - t0)

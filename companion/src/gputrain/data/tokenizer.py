"""Text -> token IDs: the byte tokenizer and a byte-level BPE trained from scratch (chapter 1)."""

from __future__ import annotations

import heapq
import json
import math
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import torch


class ByteTokenizer:
    """The simplest tokenizer: one token per UTF-8 byte, vocabulary 256.

    Lossless on any Unicode text; chapter 1 builds a byte-level BPE on top of it.
    """

    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")

    @staticmethod
    def encode_tensor(text: str) -> torch.Tensor:
        """:meth:`encode` as a (N,) int64 tensor, without a Python list per byte (for whole corpora)."""
        return torch.frombuffer(bytearray(text.encode("utf-8")), dtype=torch.uint8).long()  # (N,)


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
            raise ValueError(
                "the split pattern drops characters; use data.SPLIT_PATTERN or one that matches everything"
            )
        return parts

    @classmethod
    def train(cls, text: str, vocab_size: int, pattern: str = SPLIT_PATTERN) -> "BPETokenizer":
        """Learn ``vocab_size - 256`` merges from ``text`` (fewer if the text runs out of pairs).

        Counts each distinct chunk once with its frequency, then after every
        merge updates only the chunks that contain the merged pair; a heap with
        lazy deletion finds the most frequent pair.
        """
        if vocab_size < 256:
            raise ValueError(
                f"vocab_size={vocab_size} is below 256: a byte-level BPE starts from the "
                "256 byte tokens; use vocab_size >= 256 (256 means plain bytes, no merges)"
            )
        if not text:
            raise ValueError(
                "cannot train a tokenizer on an empty corpus: pass some text, "
                "e.g. data.python_corpus(max_bytes=300_000)"
            )
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
        Path(path).write_text(
            json.dumps({"format": BPE_FORMAT, "version": 1, "pattern": self.pattern, "merges": self.merges}) + "\n",
            encoding="utf-8",
        )

    @classmethod
    def load(cls, path) -> "BPETokenizer":
        spec = json.loads(Path(path).read_text(encoding="utf-8"))
        if spec.get("format") != BPE_FORMAT or spec.get("version") != 1:
            raise ValueError(f"{path} is not a {BPE_FORMAT} v1 file; save it with BPETokenizer.save")
        return cls([tuple(m) for m in spec["merges"]], spec["pattern"])


def bytes_per_token(tokenizer, text: str) -> float:
    """Compression: UTF-8 bytes of ``text`` per token the tokenizer makes of it."""
    return len(text.encode("utf-8")) / max(1, len(tokenizer.encode(text)))

"""Token files: a corpus tokenized once, kept compact and memory-mapped (chapter 1).

A training corpus can be far larger than the model that reads it.  Held as
one int64 per token it costs eight bytes a byte; here each token takes the
smallest integer type that holds the vocabulary (uint8 for the 256 bytes,
uint16 up to 65,536 tokens), the tokens are written once to a cache file, and
a run maps that file into memory instead of reading it: the operating system
pages in only the windows a batch touches.

The cache file is keyed by what made it: the tokenizer, the byte cap, and the
size, modification time and SHA-256 of every input file read.  A changed input
is tokenized again; a damaged cache file is rebuilt with a one-line notice.
Text is read in blocks, so memory stays flat whatever the size of the input.
"""

from __future__ import annotations

import codecs
import hashlib
import io
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional, Sequence

import numpy as np
import torch

from .tokenizer import BPETokenizer, ByteTokenizer

TOKENS_FORMAT = "gputrain-tokens"
FOOTER_BYTES = 64  # the file ends with a fixed-size footer: format, version and the metadata's length
BLOCK_BYTES = 1 << 20  # bytes read at a time: memory stays flat whatever the input's size
_NUMPY = {torch.uint8: np.uint8, torch.uint16: np.uint16, torch.int32: np.int32}


def token_dtype(vocab_size: int) -> torch.dtype:
    """The smallest integer type that holds every token id: uint8 up to 256, uint16 up to 65,536."""
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
    if vocab_size <= 2**8:
        return torch.uint8
    if vocab_size <= 2**16:
        return torch.uint16
    if vocab_size <= 2**31:
        return torch.int32
    raise ValueError(f"vocab_size={vocab_size:,} does not fit a 32-bit token id; use a vocabulary below 2**31")


def tokenizer_id(tokenizer) -> str:
    """A short name that changes whenever the tokenizer would encode some text differently."""
    if isinstance(tokenizer, ByteTokenizer):
        return "bytes"
    if isinstance(tokenizer, BPETokenizer):
        spec = json.dumps({"pattern": tokenizer.pattern, "merges": tokenizer.merges}).encode()
        return f"bpe{tokenizer.vocab_size}-{hashlib.sha256(spec).hexdigest()[:16]}"
    raise ValueError(f"cannot cache tokens of a {type(tokenizer).__name__}; use ByteTokenizer or BPETokenizer")


def default_cache_dir() -> Path:
    """``$GPUTRAIN_CACHE``, else ``$XDG_CACHE_HOME/gputrain`` (``~/.cache/gputrain``), plus ``tokens/``."""
    if os.environ.get("GPUTRAIN_CACHE"):
        return Path(os.environ["GPUTRAIN_CACHE"]) / "tokens"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gputrain" / "tokens"


def _capped(data: bytes, left: Optional[int]) -> tuple[bytes, Optional[int], bool]:
    """``data`` cut to ``left`` bytes without splitting a character (as ``read_text_files`` cuts); was it cut?"""
    if left is None or len(data) <= left:
        return data, None if left is None else left - len(data), False
    return data[:left].decode("utf-8", errors="ignore").encode("utf-8"), 0, True


@dataclass
class TextSource:
    """Where a corpus's text comes from: files read in order, or the rows of a Hugging Face dataset.

    :meth:`blocks` yields the text as UTF-8 byte blocks, exactly the bytes
    :func:`gputrain.data.read_text_files` would give for files (undecodable
    bytes replaced, line endings made ``\\n``) or the rows joined by newlines,
    cut at ``max_bytes`` (None: all of it).
    """

    label: str  # how logs name it: 'stdlib', a file name, 'hf:NAME'
    files: Sequence[Path] = ()
    rows: Optional[Callable[[], Iterable[str]]] = None  # a dataset's text column, row by row
    max_bytes: Optional[int] = None  # read at most this many UTF-8 bytes of text
    identity: dict = field(default_factory=dict)  # what the cache file's name is derived from (with the cap)
    fingerprint: Optional[str] = None  # rows only: a content hash the dataset library keeps (None: never reuse)
    capped: bool = False  # set by blocks(): reading stopped before the end of the input
    crlf: int = 0  # set by blocks(): CRLF line endings read as one \n (a byte fewer each)
    lone_cr: int = 0  # set by blocks(): lone CR line endings read as \n (old Mac files)

    def input_bytes(self) -> Optional[int]:
        """Bytes of the input files on disk (None for a dataset)."""
        return sum(os.stat(p).st_size for p in self.files) if self.files else None

    def blocks(self, digest=None, opened: Optional[list] = None) -> Iterator[bytes]:
        """The text in blocks of UTF-8 bytes; ``digest`` sees every raw byte read, ``opened`` gets each file's stat."""
        self.capped, left = False, self.max_bytes
        self.crlf = self.lone_cr = 0
        if self.rows is not None:
            for i, row in enumerate(self.rows()):
                data, left, cut = _capped((("\n" if i else "") + str(row)).encode("utf-8"), left)
                if data:
                    yield data
                if cut:
                    self.capped = True
                    return
            return
        for path in self.files:
            st = os.stat(path)
            if opened is not None:
                opened.append([str(Path(path).resolve()), st.st_size, st.st_mtime_ns])
            # what open(path, encoding="utf-8", errors="replace") does, block by block
            decoder = io.IncrementalNewlineDecoder(codecs.getincrementaldecoder("utf-8")(errors="replace"), True)
            last = b""  # the byte before this block: a CRLF may straddle two blocks
            with open(path, "rb") as f:
                while True:
                    raw = f.read(BLOCK_BYTES)
                    if digest is not None:
                        digest.update(raw)
                    crlf = (last + raw).count(b"\r\n")
                    self.crlf, self.lone_cr = self.crlf + crlf, self.lone_cr + raw.count(b"\r") - crlf
                    last = raw[-1:]
                    data, left, cut = _capped(decoder.decode(raw, final=not raw).encode("utf-8"), left)
                    if data:
                        yield data
                    if cut:  # the cap was reached with text left over
                        self.capped = True
                        return
                    if not raw:
                        break

    def key(self) -> dict:
        """What a cache of this text must match: the files read with size, mtime and SHA-256 (reads the input)."""
        if self.rows is not None:
            return {"rows": self.identity, "fingerprint": self.fingerprint, "max_bytes": self.max_bytes}
        digest, opened = hashlib.sha256(), []
        for _ in self.blocks(digest, opened):
            pass
        return {"files": opened, "sha256": digest.hexdigest(), "max_bytes": self.max_bytes}


@dataclass
class TokenFile:
    """A tokenized corpus: the token ids and where they came from."""

    tokens: torch.Tensor  # (N,) ids in the smallest dtype holding the vocabulary; memory-mapped when cached
    n_bytes: int  # UTF-8 bytes of the text they encode
    capped: bool  # the byte cap stopped reading before the end of the input
    path: Optional[Path]  # the cache file (None: kept in memory only)
    status: str  # 'reused', 'built', 'rebuilt (why)' or 'in memory'
    sha256: Optional[str] = None  # SHA-256 of the token ids: a checkpoint records it, a resume compares it


class CorruptCache(ValueError):
    """A token cache file that cannot be trusted."""


def _footer(meta_len: int) -> bytes:
    text = f"{TOKENS_FORMAT} v1 {meta_len:d}\n".encode()
    return text + b" " * (FOOTER_BYTES - len(text))


def read_meta(path: Path) -> dict:
    """The metadata a token file ends with; :class:`CorruptCache` when the file is damaged."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            if size < FOOTER_BYTES:
                raise CorruptCache(f"{size} bytes is too short for a token file")
            f.seek(size - FOOTER_BYTES)
            m = re.fullmatch(rf"{TOKENS_FORMAT} v1 (\d+)\n *", f.read(FOOTER_BYTES).decode("ascii", "replace"))
            if not m or int(m.group(1)) > size - FOOTER_BYTES:
                raise CorruptCache("no gputrain-tokens footer at its end")
            f.seek(size - FOOTER_BYTES - int(m.group(1)))
            meta = json.loads(f.read(int(m.group(1))))
        data_bytes = meta["n_tokens"] * np.dtype(meta["dtype"]).itemsize
        kinds = {"key": dict, "capped": bool, "n_bytes": int, "tokens_sha256": str}
        if not all(isinstance(meta[name], kind) for name, kind in kinds.items()):
            raise CorruptCache("its metadata is incomplete")
        if data_bytes != size - FOOTER_BYTES - int(m.group(1)):
            raise CorruptCache(f"it holds {size} bytes, its metadata says {data_bytes} of tokens")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CorruptCache(str(exc)) from None
    return meta


def _data_sha256(path: Path, n_bytes: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while n_bytes > 0:
            chunk = f.read(min(BLOCK_BYTES, n_bytes))
            if not chunk:
                break
            digest.update(chunk)
            n_bytes -= len(chunk)
    return digest.hexdigest()


def _token_arrays(blocks: Iterable[bytes], tokenizer, dtype: torch.dtype) -> Iterator[np.ndarray]:
    """Token ids of the text blocks.  A BPE is fed whole pieces only: a cut after a non-space before a newline,
    where its split pattern always cuts, so the ids equal those of the whole text."""
    np_dtype = _NUMPY[dtype]
    if isinstance(tokenizer, ByteTokenizer):
        for data in blocks:
            yield np.frombuffer(data, dtype=np.uint8)
        return
    carry = ""
    for data in blocks:
        text = carry + data.decode("utf-8")
        cut = max((m.start() + 1 for m in re.finditer(r"\S\n", text)), default=0)
        if cut:
            yield np.asarray(tokenizer.encode(text[:cut]), dtype=np_dtype)
        carry = text[cut:]
    if carry:
        yield np.asarray(tokenizer.encode(carry), dtype=np_dtype)


def map_tokens(path: Path, dtype: torch.dtype, n_tokens: int) -> torch.Tensor:
    """The first ``n_tokens`` ids of a token file, memory-mapped copy-on-write: nothing is read until used."""
    if n_tokens == 0:
        return torch.empty(0, dtype=dtype)
    return torch.from_numpy(np.memmap(path, dtype=_NUMPY[dtype], mode="c", shape=(n_tokens,)))


class _Tokenized:
    """Token arrays of a source, counting the text bytes and hashing the raw input and the tokens on the way."""

    def __init__(self, source: TextSource, tokenizer, dtype: torch.dtype):
        self.source, self.tokenizer, self.dtype = source, tokenizer, dtype
        self.digest, self.opened, self.token_digest = hashlib.sha256(), [], hashlib.sha256()
        self.n_bytes = self.n_tokens = 0

    def _counted(self) -> Iterator[bytes]:
        for data in self.source.blocks(self.digest, self.opened):
            self.n_bytes += len(data)
            yield data

    def __iter__(self) -> Iterator[np.ndarray]:
        for arr in _token_arrays(self._counted(), self.tokenizer, self.dtype):
            self.token_digest.update(arr.tobytes())
            self.n_tokens += len(arr)
            yield arr

    def key(self) -> dict:
        """The source's key, from what this pass read (no second pass over files)."""
        if self.source.rows is not None:
            return self.source.key()
        return {"files": self.opened, "sha256": self.digest.hexdigest(), "max_bytes": self.source.max_bytes}


def tokenize_source(
    source: TextSource,
    tokenizer,
    cache_dir: Optional[Path] = None,
    notice: Callable[[str], None] = print,
) -> TokenFile:
    """``source`` tokenized: from the cache in ``cache_dir`` when it matches, else tokenized and cached there.

    ``cache_dir=None`` keeps the tokens in memory only (still compact).  A
    cache directory that cannot be written falls back to that with a one-line
    ``notice``; a damaged cache file is rebuilt with one.
    """
    dtype = token_dtype(tokenizer.vocab_size)
    tok_id = tokenizer_id(tokenizer)
    if cache_dir is not None:
        name = json.dumps({"tokenizer": tok_id, "source": source.identity, "max_bytes": source.max_bytes})
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", source.label)[:40]
        path = Path(cache_dir) / f"{stem}-{hashlib.sha256(name.encode()).hexdigest()[:16]}.tokens"
        reused, status = _reuse(path, source, tok_id, dtype, notice)
        if reused is not None:
            return reused
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        except OSError as exc:
            why = exc.strerror or exc
            notice(f"cannot write the token cache in {str(cache_dir)!r} ({why}); keeping the tokens in memory")
        else:
            return _build_file(path, fd, tmp, _Tokenized(source, tokenizer, dtype), tok_id, status)
    run = _Tokenized(source, tokenizer, dtype)
    arrays = list(run)
    tokens = torch.from_numpy(np.concatenate(arrays)) if arrays else torch.empty(0, dtype=dtype)
    return TokenFile(tokens, run.n_bytes, source.capped, None, "in memory", run.token_digest.hexdigest())


def _reuse(path: Path, source: TextSource, tok_id: str, dtype: torch.dtype, notice) -> tuple[Optional[TokenFile], str]:
    """The cached tokens when ``path`` matches the source, else None and the status a new build will have."""
    if not path.exists():
        return None, "built"
    try:
        meta = read_meta(path)
        return _matching(path, meta, source, tok_id, dtype)
    except CorruptCache as exc:
        notice(f"token cache {str(path)!r} is damaged ({exc}); rebuilding it")
        return None, "rebuilt (the cache was damaged)"


def _matching(path: Path, meta: dict, source: TextSource, tok_id: str, dtype: torch.dtype):
    """:func:`_reuse` once the metadata has been read; :class:`CorruptCache` when the file cannot be trusted."""
    changed = None, "rebuilt (the input changed)"
    if meta.get("tokenizer") != tok_id or meta.get("dtype") != str(np.dtype(_NUMPY[dtype])):
        return changed
    if source.rows is not None and source.fingerprint is None:
        return changed  # no content hash to trust: read the rows again
    try:
        for p, size, mtime in meta["key"].get("files", []):  # a new size or mtime needs no hashing
            st = os.stat(p) if os.path.exists(p) else None
            if st is None or (st.st_size, st.st_mtime_ns) != (size, mtime):
                return changed
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise CorruptCache(f"its metadata has no usable key ({exc})") from None
    if meta.get("key") != source.key():  # same sizes and times: compare the contents' SHA-256
        return changed
    if _data_sha256(path, meta["n_tokens"] * np.dtype(meta["dtype"]).itemsize) != meta["tokens_sha256"]:
        raise CorruptCache("its tokens fail their checksum")
    tokens = map_tokens(path, dtype, meta["n_tokens"])
    return TokenFile(tokens, meta["n_bytes"], meta["capped"], path, "reused", meta["tokens_sha256"]), ""


def _build_file(path: Path, fd: int, tmp: str, run: _Tokenized, tok_id: str, status: str) -> TokenFile:
    """Tokenize into the temporary file ``tmp`` beside ``path``, then rename it into place: never a half cache."""
    try:
        with os.fdopen(fd, "wb") as f:
            for arr in run:
                f.write(arr.tobytes())
            meta = {
                "format": TOKENS_FORMAT,
                "tokenizer": tok_id,
                "dtype": str(np.dtype(_NUMPY[run.dtype])),
                "n_tokens": run.n_tokens,
                "n_bytes": run.n_bytes,
                "capped": run.source.capped,
                "source": run.source.label,
                "key": run.key(),
                "tokens_sha256": run.token_digest.hexdigest(),
            }
            blob = json.dumps(meta).encode()
            f.write(blob + _footer(len(blob)))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    tokens = map_tokens(path, run.dtype, run.n_tokens)
    return TokenFile(tokens, run.n_bytes, run.source.capped, path, status, run.token_digest.hexdigest())

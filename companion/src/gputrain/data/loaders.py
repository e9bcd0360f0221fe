"""Token datasets, DataLoaders, and measuring a loader's throughput against a step (chapter 1)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from ..device import synchronize
from .images import decode_jpeg, random_crop, random_flip, resize_shorter
from .tokens import map_tokens


class TokenDataset(Dataset):
    """Non-overlapping windows of a token stream as next-token pairs.

    Item ``i`` is ``(x, y)`` with ``x = tokens[i*T : i*T+T]`` and ``y`` the same
    window shifted by one: the target at every position is the next token.
    The stream stays as it is given (a compact, memory-mapped uint8 one from
    :func:`gputrain.data.tokenize_source`, say): only the window an item reads
    is copied, as int64 ids.

    ``file``: the token file ``tokens`` was mapped from, with ``tokens[0]`` its
    id number ``first``.  An item is then read with one ``os.pread`` instead
    of through the map.  Both give the same ids, but every page a map touches
    stays in the process's resident memory: random windows touch most of a
    corpus within one epoch, so its whole size would count against the run.
    Read with ``pread``, the file stays in the kernel's page cache, shared
    and evictable, and the process holds one window at a time.  (Where the
    OS has no ``pread``, Windows, items come from the map.)
    """

    def __init__(self, tokens: torch.Tensor, block_size: int, file: Optional[Path] = None, first: int = 0):
        if tokens.dim() != 1:
            raise ValueError(f"tokens must be 1-D, got shape {tuple(tokens.shape)}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        if len(tokens) < block_size + 1:
            raise ValueError(
                f"{len(tokens)} tokens cannot make one window of {block_size}+1; use more text or a smaller block_size"
            )
        if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
            raise ValueError(f"tokens must be integer ids, got dtype {tokens.dtype}")
        self.tokens = tokens  # (N,) kept compact: no int64 copy of the corpus
        self.block_size = block_size
        self.file, self.first, self._handle, self._identity = None, first, None, None
        if file is not None and hasattr(os, "pread"):
            self.file = Path(file)
            end = (first + len(tokens)) * tokens.element_size()
            if first < 0 or os.fstat(self._open().fileno()).st_size < end:
                raise ValueError(f"token file {file} holds fewer than the {first} + {len(tokens)} ids to read from it")

    def _open(self):
        """The token file, opened once per process; the same file (device, inode) as when the dataset was made."""
        if self._handle is None:
            handle = open(self.file, "rb", buffering=0)
            st = os.fstat(handle.fileno())
            if self._identity not in (None, (st.st_dev, st.st_ino)):
                handle.close()
                raise RuntimeError(f"token file {self.file} was replaced during the run; start the run again")
            self._handle, self._identity = handle, (st.st_dev, st.st_ino)
        return self._handle

    def __getstate__(self) -> dict:
        """What a copy (a spawned DataLoader worker) needs: never the open file; the ids only where no file has them.

        A file-backed dataset travels as the file's name, dtype and length, and
        the copy maps the file again; pickled as a tensor, the mapped corpus
        was copied whole into every worker.  Ids held in memory travel as they
        are, uint16 ones as a NumPy array: torch 2.13 pickles a uint16 tensor
        that it cannot unpickle.
        """
        state = {**self.__dict__, "_handle": None}
        if self.file is not None:
            state["tokens"] = (self.tokens.dtype, len(self.tokens))
        elif self.tokens.dtype == torch.uint16:
            state["tokens"] = self.tokens.numpy()
        return state

    def __setstate__(self, state: dict) -> None:
        tokens = state["tokens"]
        if isinstance(tokens, tuple):  # mapped again: the same ids of the same file, checked when first read
            dtype, n = tokens
            try:
                tokens = map_tokens(state["file"], dtype, state["first"] + n)[state["first"] :]
            except (OSError, ValueError) as exc:  # gone, or shorter than the ids to read
                raise RuntimeError(
                    f"token file {state['file']} was replaced during the run; start the run again ({exc})"
                ) from None
        elif isinstance(tokens, np.ndarray):
            tokens = torch.from_numpy(tokens)
        self.__dict__.update(state, tokens=tokens)

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.block_size

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= i < len(self):
            raise IndexError(i)
        start = i * self.block_size
        if self.file is None:
            chunk = self.tokens[start : start + self.block_size + 1].long()  # (T + 1,) copied out of the stream
        else:
            chunk = self._read(start).long()
        return chunk[:-1], chunk[1:]  # (T,), (T,)

    def _read(self, start: int) -> torch.Tensor:
        """Ids ``start .. start + T`` read from the token file (a positionless read: safe after a fork)."""
        size = self.tokens.element_size()
        n = (self.block_size + 1) * size
        data = os.pread(self._open().fileno(), n, (self.first + start) * size)
        if len(data) != n:
            raise RuntimeError(f"token file {self.file} was cut short during the run; delete it and start again")
        return torch.frombuffer(bytearray(data), dtype=self.tokens.dtype)


def split_tokens(tokens: torch.Tensor, val_fraction: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """Split a token stream into a leading train part and a trailing validation part."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    n_val = max(1, int(len(tokens) * val_fraction))
    return tokens[:-n_val], tokens[-n_val:]


def make_loader(
    dataset: Dataset,
    batch_size: int,
    *,
    shuffle: bool = True,
    drop_last: bool = False,
    seed: int = 0,
    num_workers: int = 0,
    pin_memory: bool = False,
) -> DataLoader:
    """A DataLoader with a seeded shuffle; ``pin_memory`` only takes effect when CUDA exists.

    Pinned (page-locked) host memory lets the copy to a GPU run asynchronously;
    without a GPU there is nothing to copy to, so it is switched off.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if drop_last and batch_size > len(dataset):
        raise ValueError(
            f"batch_size={batch_size} exceeds the {len(dataset)} samples of the dataset, so "
            "drop_last=True would yield no batch at all; lower batch_size or set drop_last=False"
        )
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        drop_last=drop_last,
        generator=torch.Generator().manual_seed(seed),
        num_workers=num_workers,
        pin_memory=pin_memory and torch.cuda.is_available(),
        persistent_workers=False,
    )


def token_loader(tokens: torch.Tensor, block_size: int, batch_size: int, **kwargs) -> DataLoader:
    """Batches of shifted ``(x, y)`` pairs, each (B, T), from a 1-D token stream."""
    return make_loader(TokenDataset(tokens, block_size), batch_size, **kwargs)


def infinite(loader) -> Iterator:
    """Cycle through a DataLoader forever (a new shuffle each pass)."""
    while True:
        yield from loader


class JpegImages(Dataset):
    """Images decoded from JPEG bytes on every access, resized, randomly cropped and flipped.

    The per-sample work a real image loader does (decode, resize, crop) in a
    worker process; item ``i`` uses JPEG ``i % len(jpegs)``.
    """

    def __init__(self, jpegs: Sequence[bytes], length: int, size: int = 224):
        if not jpegs:
            raise ValueError(
                "JpegImages needs at least one JPEG; e.g. [p.read_bytes() for p in data.sample_image_files()]"
            )
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


def loader_throughput(
    loader: DataLoader, max_batches: Optional[int] = None, device: Optional[torch.device] = None
) -> LoaderStats:
    """Iterate ``loader`` (up to ``max_batches``), copying each batch to ``device`` if given; time it."""
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

"""Timing a block correctly on a GPU and a CPU: :func:`synchronize`, :class:`Timer`, :func:`median_seconds`."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from .choice import device


def synchronize(dev: Optional[torch.device] = None) -> None:
    """Wait for queued GPU work (a no-op on the CPU)."""
    dev = dev or device()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


@dataclass
class Timer:
    """Wall time of a block, correct on GPUs (CUDA events) and CPUs (perf_counter).

    >>> with Timer() as t:
    ...     work()
    >>> t.seconds
    """

    dev: Optional[torch.device] = None
    seconds: float = 0.0

    def __enter__(self) -> "Timer":
        self.dev = self.dev or device()
        if self.dev.type == "cuda":
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        if self.dev.type == "cuda":
            self._end.record()
            self._end.synchronize()
            self.seconds = self._start.elapsed_time(self._end) / 1e3
        else:
            self.seconds = time.perf_counter() - self._t0


def median_seconds(
    fn: Callable[[], object],
    repeats: int = 5,
    warmup: int = 1,
    dev: Optional[torch.device] = None,
    min_seconds: float = 0.0,
) -> float:
    """Median wall time of one call of ``fn()``, correct on GPUs (queued work is waited for).

    ``warmup`` untimed calls first, then ``repeats`` timed samples.  A call too
    short for the clock can be repeated inside each sample until the sample lasts
    about ``min_seconds``; the sample is then divided by its number of calls.
    """
    dev = dev or device()
    for _ in range(warmup):
        fn()
    synchronize(dev)
    inner = 1
    if min_seconds > 0:
        with Timer(dev) as t:
            fn()
        inner = max(1, int(min_seconds / max(t.seconds, 1e-9)))
    times = []
    for _ in range(repeats):
        with Timer(dev) as t:
            for _ in range(inner):
                fn()
        times.append(t.seconds / inner)
    return statistics.median(times)

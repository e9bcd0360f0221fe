"""Backend switches a measurement sets: :func:`cpu_threads`, :func:`fp32_matmul` (TF32), :func:`keep_freed_memory`."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import sys

import torch


@contextlib.contextmanager
def cpu_threads(n: int):
    """Run CPU operators on ``n`` threads inside the block, then restore the setting.

    On a small, shared CPU, operators on tiny tensors spend longer handing work
    between threads than computing; one thread measures the arithmetic.
    """
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


@functools.lru_cache(maxsize=None)
def keep_freed_memory(max_block: int = 32 * 2**20) -> bool:
    """Let glibc's malloc keep freed blocks of up to ``max_block`` bytes for reuse (chapter 6's training loop).

    A training step frees its activations and allocates the same sizes again
    in the next step.  glibc returns every block above its mmap threshold
    (128 KiB until the process frees some larger block) to the kernel at once,
    so the next step faults the same pages in again, zero-filled: hundreds of
    thousands of page faults in a short CPU run.  Fixing the threshold at 32 MiB,
    the most glibc's own adjustment reaches, and the trim threshold at twice
    that keeps a step's buffers in the process.  The price is a little peak
    memory: blocks of mixed sizes (2, 4, 6 and 8 MiB in a small GPT) all come
    from one heap, whose holes fit the next step less than perfectly.  Measured
    on a 2-core EPYC (issue 24's 60-step run; three sets of 2-3 runs): 123
    thousand page faults instead of 1.3-1.5 million, 13-14% less wall time,
    and 4 to 16 MiB more peak RSS (of about 605).
    Done once per process; returns False where the C library is not glibc.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's <malloc.h>
    return bool(mallopt(m_mmap_threshold, max_block)) and bool(mallopt(m_trim_threshold, 2 * max_block))


@contextlib.contextmanager
def fp32_matmul(precision: str):
    """Let float32 matrix products use TF32 tensor cores ("tf32") or forbid it ("ieee"), inside the block.

    TF32 keeps float32's range with a 10-bit mantissa (chapter 7); on Ampere and
    newer GPUs it runs float32 products on tensor cores ("Making it fast").
    """
    if precision not in ("tf32", "ieee"):
        raise ValueError(f"precision must be 'tf32' or 'ieee', got {precision!r}")
    knob = torch.backends.cuda.matmul
    name, value = "fp32_precision", precision
    try:
        old = knob.fp32_precision  # torch >= 2.9
    except AttributeError:  # older torch: the boolean switch
        name, value = "allow_tf32", precision == "tf32"
        old = knob.allow_tf32
    setattr(knob, name, value)
    try:
        yield
    finally:
        setattr(knob, name, old)

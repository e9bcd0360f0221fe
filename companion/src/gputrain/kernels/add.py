"""The first kernel: ``z = x + y``, one block of elements per program (chapter 11).

It introduces the three ideas every Triton kernel is made of: a *program id*
(which block am I?), a *block* of offsets (``tl.arange``), and a *mask* that
keeps the last, partial block from touching memory past the end.
"""

from __future__ import annotations

from typing import Optional

import torch

from .checks import KernelInputError, check_block, check_tensor
from .launch import cdiv, launch, tl, triton
from .traffic import Traffic, count_read, count_write, counter_args

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit
def add_kernel(x_ptr, y_ptr, z_ptr, n, counter, BLOCK: tl.constexpr, ELEM_BYTES: tl.constexpr, COUNT: tl.constexpr):
    pid = tl.program_id(axis=0)  # which block of the vector this program owns
    offsets = pid * BLOCK + tl.arange(0, BLOCK)  # (BLOCK,) element indices
    mask = offsets < n  # the last block may run past the end
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(z_ptr + offsets, x + y, mask=mask)
    if COUNT:
        count_read(counter, mask, 2 * ELEM_BYTES)  # x and y
        count_write(counter, mask, ELEM_BYTES)


def add(x: torch.Tensor, y: torch.Tensor, *, block: int = 1024, traffic: Optional[Traffic] = None) -> torch.Tensor:
    """``x + y`` by :func:`add_kernel`: ``cdiv(n, block)`` programs, each adding ``block`` elements."""
    check_tensor("x", x, dtypes=FLOAT_DTYPES)
    check_tensor("y", y, dtypes=(x.dtype,))
    if x.shape != y.shape:
        raise KernelInputError(f"x and y must have the same shape, got {tuple(x.shape)} and {tuple(y.shape)}")
    check_block("block", block)
    z = torch.empty_like(x)
    n = x.numel()
    if n == 0:
        return z
    counter, count = counter_args(traffic, x.device)
    launch(add_kernel, (cdiv(n, block),), x, y, z, n, counter, BLOCK=block, ELEM_BYTES=x.element_size(), COUNT=count)
    return z

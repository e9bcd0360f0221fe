"""The first kernel: ``z = x + y``, one block of elements per program (chapter 11).

It introduces the three ideas every Triton kernel is made of: a *program id*
(which block am I?), a *block* of offsets (``tl.arange``), and a *mask* that
keeps the last, partial block from touching memory past the end.
"""

from __future__ import annotations

from typing import Optional

import torch

from .checks import KernelInputError, check_block, check_tensor
from .launch import cdiv, interpreted, launch, tl, triton
from .traffic import Traffic, count_read, count_write, counter_args

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit
def add_kernel(x_ptr, y_ptr, z_ptr, n, counter, BLOCK: tl.constexpr, ELEM_BYTES: tl.constexpr, COUNT: tl.constexpr):
    pid = tl.program_id(axis=0)  # which block of the vector this program owns
    offsets = pid * BLOCK + tl.arange(0, BLOCK)  # (BLOCK,) element indices
    mask = offsets < n  # the last block may run past the end
    # add in fp32 (the interpreter would add bf16 bit patterns, not values)
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)  # (BLOCK,)
    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
    z = (x + y).to(z_ptr.dtype.element_ty)  # one rounding, to the output's dtype
    tl.store(z_ptr + offsets, z, mask=mask)
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
    # The interpreter casts fp32 to bf16 by cutting bits off (rounding toward zero): there the kernel stores the
    # fp32 sum and torch rounds it to nearest.  Compiled, the kernel rounds to nearest itself and stores bf16.
    truncates = interpreted() and x.dtype == torch.bfloat16
    z = torch.empty_like(x, dtype=torch.float32 if truncates else x.dtype)
    n = x.numel()
    if n:
        counter, count = counter_args(traffic, x.device)
        launch(
            add_kernel, (cdiv(n, block),), x, y, z, n, counter, BLOCK=block, ELEM_BYTES=x.element_size(), COUNT=count
        )
    return z.to(x.dtype)

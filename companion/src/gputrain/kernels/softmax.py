"""Row softmax, fused into one kernel and unfused into five, with the bytes of each counted (chapter 11).

``softmax(x)`` along the last dimension needs, per row, a max, an exponential,
a sum and a division.  Written as PyTorch expressions one by one
(``m = x.amax(-1); t = x - m; e = t.exp(); s = e.sum(-1); e / s``), each is its
own kernel: it reads its input from memory and writes its result back, five
reads of a row-sized tensor and three writes.  :func:`softmax_unfused` runs
exactly those five kernels.  :func:`softmax` is the fused kernel: one program
loads a row once, keeps it in registers for all four steps, and stores the
result once.  Same arithmetic, a fraction of the traffic.
"""

from __future__ import annotations

from typing import Optional

import torch

from .checks import KernelInputError, check_tensor
from .launch import launch, next_power_of_2, tl, triton
from .traffic import Traffic, count_read, count_write, counter_args

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAX_COLS = 1 << 15  # one row lives in one program's registers; wider rows need a looped (online) kernel


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, counter, BLOCK: tl.constexpr, ELEM_BYTES: tl.constexpr, COUNT: tl.constexpr):
    row = tl.program_id(0)  # one program per row
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)  # (BLOCK,)
    x = x - tl.max(x, axis=0)  # the largest entry becomes 0: exp cannot overflow (chapter 3)
    e = tl.exp(x)  # padding lanes: exp(-inf) = 0, so they add nothing to the sum
    y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    if COUNT:
        count_read(counter, mask, ELEM_BYTES)
        count_write(counter, mask, ELEM_BYTES)


# --- the unfused version: three kernel sources, five launches --------------------------------------


@triton.jit
def row_reduce_kernel(
    x_ptr, out_ptr, n_cols, counter, OP: tl.constexpr, BLOCK: tl.constexpr, ELEM_BYTES: tl.constexpr,
    COUNT: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    if OP == "max":
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
        r = tl.max(x, axis=0)
    else:
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.sum(x, axis=0)
    tl.store(out_ptr + row, r.to(out_ptr.dtype.element_ty))
    if COUNT:
        count_read(counter, mask, ELEM_BYTES)
        tl.atomic_add(counter + 1, ELEM_BYTES)  # one value per row


@triton.jit
def row_broadcast_kernel(
    x_ptr, r_ptr, out_ptr, n_cols, counter, OP: tl.constexpr, BLOCK: tl.constexpr, ELEM_BYTES: tl.constexpr,
    COUNT: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row).to(tl.float32)  # the row's max or sum
    y = x - r if OP == "sub" else x / r
    tl.store(out_ptr + row * n_cols + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
    if COUNT:
        count_read(counter, mask, ELEM_BYTES)
        tl.atomic_add(counter, ELEM_BYTES)  # the row's scalar
        count_write(counter, mask, ELEM_BYTES)


@triton.jit
def exp_kernel(x_ptr, out_ptr, n_cols, counter, BLOCK: tl.constexpr, ELEM_BYTES: tl.constexpr, COUNT: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * n_cols + cols, tl.exp(x).to(out_ptr.dtype.element_ty), mask=mask)
    if COUNT:
        count_read(counter, mask, ELEM_BYTES)
        count_write(counter, mask, ELEM_BYTES)


def _rows(x: torch.Tensor) -> tuple[torch.Tensor, int, int, int]:
    check_tensor("x", x, dtypes=FLOAT_DTYPES)
    if x.dim() == 0:
        raise KernelInputError("softmax needs at least one dimension; got a scalar")
    n_cols = x.shape[-1]
    if n_cols > MAX_COLS:
        raise KernelInputError(f"rows of {n_cols} entries do not fit one program (at most {MAX_COLS})")
    rows = x.numel() // max(n_cols, 1)
    return x.reshape(rows, n_cols), rows, n_cols, next_power_of_2(max(n_cols, 1))


def softmax(x: torch.Tensor, *, traffic: Optional[Traffic] = None) -> torch.Tensor:
    """Softmax over the last dimension in one fused kernel: each row read once, written once."""
    x2, rows, n_cols, block = _rows(x)
    y = torch.empty_like(x2)
    if rows and n_cols:
        counter, count = counter_args(traffic, x.device)
        launch(softmax_kernel, (rows,), x2, y, n_cols, counter, BLOCK=block, ELEM_BYTES=x.element_size(), COUNT=count)
    return y.reshape(x.shape)


def softmax_unfused(x: torch.Tensor, *, traffic: Optional[Traffic] = None) -> torch.Tensor:
    """The same softmax as five kernels, the way ``t = (x - x.amax(-1)).exp(); t / t.sum(-1)`` runs in eager PyTorch."""
    x2, rows, n_cols, block = _rows(x)
    if not (rows and n_cols):
        return torch.empty_like(x)
    counter, count = counter_args(traffic, x.device)
    meta = dict(BLOCK=block, ELEM_BYTES=x.element_size(), COUNT=count)
    row_max = torch.empty(rows, dtype=x.dtype, device=x.device)  # (R,)
    shifted, e, y = torch.empty_like(x2), torch.empty_like(x2), torch.empty_like(x2)  # (R, C) each
    row_sum = torch.empty_like(row_max)
    launch(row_reduce_kernel, (rows,), x2, row_max, n_cols, counter, OP="max", **meta)
    launch(row_broadcast_kernel, (rows,), x2, row_max, shifted, n_cols, counter, OP="sub", **meta)
    launch(exp_kernel, (rows,), shifted, e, n_cols, counter, **meta)
    launch(row_reduce_kernel, (rows,), e, row_sum, n_cols, counter, OP="sum", **meta)
    launch(row_broadcast_kernel, (rows,), e, row_sum, y, n_cols, counter, OP="div", **meta)
    return y.reshape(x.shape)

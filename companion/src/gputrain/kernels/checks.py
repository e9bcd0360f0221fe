"""Input checks every kernel wrapper runs before it launches (chapter 11).

A kernel trusts its pointers: a wrong shape reads someone else's memory, and
in Triton's interpreter an out-of-bounds load kills the process.  So every
wrapper checks first and raises :class:`KernelInputError`, one line that says
what was wrong and what to pass instead.
"""

from __future__ import annotations

import numbers
from typing import Iterable, Optional

import torch

from .launch import kernel_device


class KernelInputError(ValueError):
    """A tensor or a block size that a kernel cannot take (the message says which and why)."""


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def check_tensor(
    name: str,
    t: object,
    *,
    dtypes: Iterable[torch.dtype],
    ndim: Optional[int] = None,
    device: Optional[torch.device] = None,
) -> torch.Tensor:
    """``t`` must be a contiguous tensor of one of ``dtypes``, with ``ndim`` dims, on the kernels' device."""
    if not isinstance(t, torch.Tensor):
        raise KernelInputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    allowed = tuple(dtypes)
    if t.dtype not in allowed:
        names = ", ".join(dtype_name(d) for d in allowed)
        raise KernelInputError(f"{name} has dtype {dtype_name(t.dtype)}; this kernel takes {names} (convert: .to())")
    if ndim is not None and t.dim() != ndim:
        raise KernelInputError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    want = device or kernel_device()
    if t.device.type != want.type:
        raise KernelInputError(
            f"{name} is on {t.device}, but the kernels run on {want.type} here (move it with .to('{want.type}'))"
        )
    if not t.is_contiguous():
        raise KernelInputError(f"{name} is not contiguous (strides {t.stride()}); pass {name}.contiguous()")
    return t


def check_block(name: str, value: int, *, minimum: int = 1, maximum: int = 1 << 16) -> int:
    """A block size must be a power of two in [minimum, maximum] (``tl.dot`` needs at least 16)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise KernelInputError(f"{name} must be an int, got {value!r}")
    if value < 1 or value & (value - 1):
        raise KernelInputError(f"{name}={value} is not a power of two; Triton blocks are 16, 32, 64, ...")
    if value < minimum:
        why = " (tl.dot multiplies blocks of at least 16 x 16)" if minimum == 16 else ""
        raise KernelInputError(f"{name}={value} is below {minimum}{why}")
    if value > maximum:
        raise KernelInputError(f"{name}={value} is above {maximum}; use a smaller block")
    return value


def check_tiles(name: str, block: object, names: tuple[str, ...], *, minimum: int = 1, maximum: int = 1 << 16):
    """``block`` must be a tuple (or list) of one power of two per name in ``names``; returns them as a tuple."""
    example = ", ".join(str(max(minimum, 32)) for _ in names)
    if not isinstance(block, (tuple, list)) or len(block) != len(names):
        got = f"{len(block)} values {tuple(block)}" if isinstance(block, (tuple, list)) else repr(block)
        raise KernelInputError(
            f"{name} takes {len(names)} block sizes ({', '.join(names)}), got {got}; pass e.g. {name}=({example})"
        )
    return tuple(check_block(n, v, minimum=minimum, maximum=maximum) for n, v in zip(names, block))


def check_sizes(minimum: int = 1, **sizes: object) -> None:
    """Each size (a dimension, a block, an item size, a number of stages) must be an int >= ``minimum``."""
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise KernelInputError(f"{name} must be an int >= {minimum}, got {value!r}")
        if value < minimum:
            raise KernelInputError(f"{name}={value} is below {minimum}; pass {name} >= {minimum}")


def check_matmul_shapes(a: torch.Tensor, b: torch.Tensor, *, b_transposed: bool = False) -> tuple[int, int, int]:
    """(M, K) @ (K, N), or (M, K) @ (N, K)^T: the inner dimensions must agree.  Returns (M, N, K)."""
    m, k = a.shape
    n, kb = (b.shape[0], b.shape[1]) if b_transposed else (b.shape[1], b.shape[0])
    if k != kb:
        layout = "(N, K)" if b_transposed else "(K, N)"
        raise KernelInputError(
            f"matmul shapes do not match: a is {tuple(a.shape)} (M, K) but b is {tuple(b.shape)} {layout}; "
            f"the inner dimensions {k} and {kb} must be equal"
        )
    return m, n, k

"""bf16 arithmetic emulated in FP32, for CPUs without native bf16 (chapters 7 and 10).

Where a CPU multiplies bf16 matrices in software, :class:`EmulatedBf16`
produces bf16's numbers at FP32's speed: every result that would be bf16 is
rounded to bf16 and kept in an FP32 tensor.
"""

from __future__ import annotations

import weakref
from typing import Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_aten = torch.ops.aten
# what torch.autocast(dtype=bfloat16) runs in bf16 on a CPU, as the aten ops a GPT reaches (its "lower
# precision" list: linear, matmul, bmm, baddbmm, SDPA, convolutions), forward and backward
_BF16_PRODUCTS = {
    _aten.mm.default,
    _aten.addmm.default,
    _aten.bmm.default,
    _aten.baddbmm.default,
    _aten.convolution.default,
    _aten.convolution_backward.default,
    _aten._scaled_dot_product_flash_attention_for_cpu.default,
    _aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
}
# what stays in FP32 whatever its inputs: the loss (GPT.forward casts the logits with .float(), which
# in FP32 emulation changes nothing, so the loss's ops are named here)
_FP32_OPS = {
    _aten._log_softmax.default,
    _aten._log_softmax_backward_data.default,
    _aten.nll_loss_forward.default,
    _aten.nll_loss_backward.default,
    _aten.mse_loss.default,
    _aten.mse_loss_backward.default,
}


def bf16_values(x: torch.Tensor) -> torch.Tensor:
    """``x`` rounded to the nearest bfloat16 (ties to even), kept in ``x``'s dtype."""
    return x.to(torch.bfloat16).to(x.dtype)


class EmulatedBf16(TorchDispatchMode):
    """bf16 arithmetic computed in FP32: every bf16 result is rounded to bf16, stored in an FP32 tensor.

    A CPU without native bf16 (no AVX-512 BF16 or AMX: see
    :func:`gputrain.speed.native_bf16`) multiplies bf16 matrices many times
    slower than FP32, because it converts every operand in software.  The
    numbers bf16 produces do not need bf16 hardware, though: a bf16 product
    is the FP32 product of bf16 operands, rounded to bf16.  Inside this mode
    the FP32 tensors that would be bf16 are tracked (by storage) and every
    operation whose floating inputs are all such tensors has its result
    rounded to bf16; an operation that writes into one rounds too, as a bf16
    tensor would.  Mixed inputs compute in FP32, as type promotion would.

    * ``autocast=True`` (default) emulates ``torch.autocast("cpu",
      dtype=torch.bfloat16)``: matrix products (and attention) round their
      operands and results to bf16, forward and backward, and what follows
      from them stays bf16; the loss stays FP32.
    * :meth:`hold` makes tensors bf16 (rounded in place), as ``.to(torch.bfloat16)``
      makes a model's weights: use it for a model trained in pure bf16.

    The results are autocast's to within a bf16 rounding step here and there
    (an FP32 product may add in another order than the bf16 kernel and land
    on the other side of a rounding boundary); ``tests/test_precision.py``
    holds them to that.  Chapters 7 and 10.
    """

    def __init__(self, autocast: bool = True):
        super().__init__()
        self.autocast = autocast
        self._bf16: dict[int, int] = {}  # storage data pointer -> 1 for storages holding bf16 values

    def _mark(self, t: torch.Tensor) -> None:
        st = t.untyped_storage()
        key = st.data_ptr()
        if key not in self._bf16:
            self._bf16[key] = 1
            weakref.finalize(st, self._bf16.pop, key, None)  # forget it when the storage dies

    def is_bf16(self, t: torch.Tensor) -> bool:
        """Whether ``t`` holds emulated bf16 values."""
        return t.dtype == torch.float32 and t.untyped_storage().data_ptr() in self._bf16

    @torch.no_grad()
    def hold(self, tensors: Iterable[torch.Tensor]) -> None:
        """Round FP32 tensors (a model's parameters) to bf16 in place, and treat them as bf16 from now on."""
        for t in tensors:
            if t.dtype != torch.float32:
                raise ValueError(f"EmulatedBf16 holds bf16 values in float32 tensors; got {t.dtype}")
            t.copy_(bf16_values(t))
            self._mark(t)

    def _round_outputs(self, out) -> None:
        for t in _tensors(out):
            if t.dtype == torch.float32:
                t.copy_(bf16_values(t))
                self._mark(t)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _FP32_OPS:
            return func(*args, **kwargs)
        if self.autocast and func in _BF16_PRODUCTS:  # autocast casts the operands to bf16 ...
            args = tuple(_as_bf16(a) for a in args)
            out = func(*args, **{k: _as_bf16(v) for k, v in kwargs.items()})
            self._round_outputs(out)  # ... and the product is bf16
            return out
        out = func(*args, **kwargs)
        if func.is_view:  # a view shares its input's storage, and so its format
            return out
        schema = func._schema.arguments
        written = [a for a, s in zip(args, schema) if s.alias_info is not None and s.alias_info.is_write]
        floats = [t for t in _tensors((args, kwargs.values())) if t.is_floating_point()]
        if any(self.is_bf16(w) for w in _tensors(written)):
            self._round_outputs(written)  # written into a bf16 tensor: stored in bf16
        elif floats and all(self.is_bf16(t) for t in floats):
            self._round_outputs(out)  # bf16 in, bf16 out
        return out


def _tensors(obj) -> Iterable[torch.Tensor]:
    """The tensors in an operator's arguments or results (nested lists and tuples: foreach ops, cat)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple, type({}.values()))):
        for item in obj:
            yield from _tensors(item)


def _as_bf16(a):
    """An FP32 tensor's values rounded to bf16 (a new tensor); anything else unchanged."""
    if isinstance(a, torch.Tensor) and a.dtype == torch.float32:
        return bf16_values(a)
    if isinstance(a, (list, tuple)):
        return type(a)(_as_bf16(x) for x in a)
    return a

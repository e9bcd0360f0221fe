"""Floating-point formats, rounding, loss scaling and master weights (chapter 7).

Every training number lives in some binary format: one sign bit, some
exponent bits (the *range*) and some mantissa bits (the *precision*).  This
module describes the formats a GPU trains in, rounds values to any of them
from scratch (checked against PyTorch's own casts in ``tests/test_precision.py``),
and implements the two tricks that make 16-bit training work: dynamic loss
scaling (:class:`DynamicLossScaler`, the from-scratch twin of
``torch.amp.GradScaler``) and FP32 master weights (:class:`MasterWeights`).
:class:`EmulatedBf16` computes bf16's numbers in FP32 on CPUs that have no
native bf16.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Iterable, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format: 1 sign bit, ``exponent_bits``, ``mantissa_bits``.

    ``dtype`` is the torch dtype that stores it (``None`` for TF32, which only
    exists inside tensor cores).  ``saturates``: out-of-range values become
    ``±max`` instead of ``±inf`` (FP8 E4M3 has no infinity; its top exponent
    holds numbers, all but one bit pattern, which is NaN).
    """

    name: str
    exponent_bits: int
    mantissa_bits: int
    dtype: Optional[torch.dtype]
    saturates: bool = False

    @property
    def bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def max_exponent(self) -> int:
        """Exponent of the largest finite value (IEEE formats reserve the top code for inf/NaN)."""
        top = 2**self.exponent_bits - 1 - self.bias
        return top if self.saturates else top - 1

    @property
    def max(self) -> float:
        # E4M3: the top exponent keeps its numbers except mantissa 111 (NaN) -> 1.75 * 2^8 = 448
        top_mantissa = 2 - 2.0 ** (1 - self.mantissa_bits) if self.saturates else 2 - 2.0**-self.mantissa_bits
        return top_mantissa * 2.0**self.max_exponent

    @property
    def smallest_normal(self) -> float:
        return 2.0 ** (1 - self.bias)

    @property
    def smallest_subnormal(self) -> float:
        return 2.0 ** (1 - self.bias - self.mantissa_bits)

    @property
    def eps(self) -> float:
        """Machine epsilon: the gap between 1.0 and the next representable number."""
        return 2.0**-self.mantissa_bits

    def describe(self) -> dict[str, object]:
        return {
            "format": self.name,
            "bits": self.bits,
            "sign": 1,
            "exponent": self.exponent_bits,
            "mantissa": self.mantissa_bits,
            "max": self.max,
            "smallest normal": self.smallest_normal,
            "smallest subnormal": self.smallest_subnormal,
            "eps": self.eps,
        }


FORMATS: dict[str, FloatFormat] = {
    f.name: f
    for f in (
        FloatFormat("fp32", 8, 23, torch.float32),
        FloatFormat("tf32", 8, 10, None),  # FP32's range, FP16's precision; tensor cores only
        FloatFormat("fp16", 5, 10, torch.float16),
        FloatFormat("bf16", 8, 7, torch.bfloat16),
        FloatFormat("fp8_e4m3", 4, 3, torch.float8_e4m3fn, saturates=True),
        FloatFormat("fp8_e5m2", 5, 2, torch.float8_e5m2),
    )
}
_ALIASES = {
    "float32": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "e4m3": "fp8_e4m3",
    "e5m2": "fp8_e5m2",
    "float8_e4m3fn": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2",
}


def get_format(fmt: "str | FloatFormat") -> FloatFormat:
    """Look a format up by name (``"bf16"``, ``"fp8_e4m3"``, ``"e5m2"``, ``"half"``...)."""
    if isinstance(fmt, FloatFormat):
        return fmt
    key = _ALIASES.get(str(fmt).lower(), str(fmt).lower())
    if key not in FORMATS:
        raise ValueError(f"unknown float format {fmt!r}; use one of: {', '.join(FORMATS)}")
    return FORMATS[key]


def round_to_format(x: torch.Tensor, fmt: "str | FloatFormat") -> torch.Tensor:
    """Round ``x`` to the nearest value of ``fmt`` (ties to even), returned in ``x``'s dtype.

    Written from scratch with exponent/mantissa arithmetic, so it also covers
    TF32, which has no torch dtype; the tests check it against torch's casts
    for every format that has one.  Handles subnormals, overflow (to inf, or
    to ±max for saturating formats, as torch casts E4M3), inf and NaN.
    """
    f = get_format(fmt)
    a = x.detach().double().abs()  # float64 holds every step of the arithmetic exactly
    _, e2 = torch.frexp(a)  # a = m * 2**e2 with m in [0.5, 1)
    exponent = (e2 - 1).clamp(min=1 - f.bias)  # below the normal range the spacing stays fixed
    ulp = torch.pow(2.0, (exponent - f.mantissa_bits).double())  # spacing of representable values
    q = torch.round(a / ulp) * ulp  # torch.round rounds half to even
    q = torch.where(torch.isinf(a), a, q)  # inf stays inf (NaN is restored below)
    q = torch.where(q > f.max, torch.full_like(q, f.max if f.saturates else float("inf")), q)
    # copysign, not sign(x) * q: sign(-0.0) is +0, and casts keep -0.0 (as do tiny negatives rounded to 0)
    return torch.copysign(q, x.detach().double()).to(x.dtype).where(~torch.isnan(x), x)


def bit_fields(value: float, fmt: "str | FloatFormat") -> tuple[str, str, str]:
    """The (sign, exponent, mantissa) bit strings of ``value`` rounded to ``fmt``."""
    f = get_format(fmt)
    if f.dtype is None:  # TF32: the top 19 bits of the rounded FP32 pattern
        rounded = round_to_format(torch.tensor([value], dtype=torch.float32), f)
        bits = int(rounded.view(torch.int32).item()) & 0xFFFFFFFF
        pattern = f"{bits:032b}"[: f.bits]
    else:
        stored = torch.tensor([value], dtype=torch.float32).to(f.dtype)
        int_type = {8: torch.uint8, 16: torch.int16, 32: torch.int32}[f.bits]
        bits = int(stored.view(int_type).item()) & (2**f.bits - 1)
        pattern = f"{bits:0{f.bits}b}"
    return pattern[0], pattern[1 : 1 + f.exponent_bits], pattern[1 + f.exponent_bits :]


def _fp32(value: float) -> float:
    """``value`` rounded to the nearest FP32 number (inf beyond FP32's range)."""
    return float(torch.tensor(value, dtype=torch.float64).float())


class DynamicLossScaler:
    """Dynamic loss scaling written from scratch: the behaviour of ``torch.amp.GradScaler`` (chapter 7).

    FP16 gradients below about 6e-8 flush to zero.  Multiplying the loss by a
    large ``scale`` shifts every gradient up into range; the optimizer step
    divides it out again.  If any gradient overflowed (inf/NaN), the step is
    skipped and the scale backs off; after ``growth_interval`` clean steps in
    a row it grows.  Use it like GradScaler::

        scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
    ):
        if not init_scale > 0 or not growth_factor > 1 or not 0 < backoff_factor < 1 or growth_interval < 1:
            raise ValueError("need init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1, growth_interval >= 1")
        if _fp32(init_scale) == float("inf"):
            raise ValueError(
                f"init_scale={init_scale:g} is inf in FP32 (max {torch.finfo(torch.float32).max:.4g}); "
                "pass a smaller init_scale, e.g. 2.0**16"
            )
        self.scale_value = _fp32(init_scale)
        self.growth_factor = growth_factor
        self.backoff_factor = backoff_factor
        self.growth_interval = growth_interval
        self.good_steps = 0  # clean steps since the last change of scale
        self.skipped_steps = 0  # steps skipped because a gradient was inf/NaN, in total
        self._found_inf: Optional[bool] = None  # this iteration's verdict, None until unscale_

    def get_scale(self) -> float:
        return self.scale_value

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss * scale``: backward through it produces scaled gradients."""
        return loss * self.scale_value

    def unscale_(self, optimizer: torch.optim.Optimizer) -> bool:
        """Divide the gradients by the scale in place; return whether any was inf/NaN."""
        if self._found_inf is not None:
            raise RuntimeError("unscale_() was already called since the last update()")
        inv_scale = torch.tensor(1.0 / self.scale_value, dtype=torch.float32)  # exact: scale is a power of 2
        found = False
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                found |= not bool(torch.isfinite(p.grad).all())
                p.grad.mul_(inv_scale.to(p.grad.dtype))
        self._found_inf = found
        return found

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Unscale if needed, then step unless a gradient overflowed.  Returns whether it stepped."""
        if self._found_inf is None:
            self.unscale_(optimizer)
        if self._found_inf:
            self.skipped_steps += 1
            return False
        optimizer.step()
        return True

    def update(self) -> None:
        """Back off after an overflow; grow after ``growth_interval`` clean steps in a row."""
        if self._found_inf is None:
            raise RuntimeError("update() needs a step() (or unscale_()) in this iteration first")
        # GradScaler keeps its scale as an FP32 tensor: ours is rounded to FP32 after every change,
        # and a grown scale is judged after that rounding (2^128 is finite in FP64 but inf in FP32)
        if self._found_inf:
            self.scale_value = _fp32(self.scale_value * self.backoff_factor)
            self.good_steps = 0
        else:
            self.good_steps += 1
            if self.good_steps == self.growth_interval:
                grown = _fp32(self.scale_value * self.growth_factor)
                if grown != float("inf"):  # GradScaler refuses to grow into inf
                    self.scale_value = grown
                self.good_steps = 0
        self._found_inf = None


class MasterWeights:
    """FP32 master copies of a low-precision model's parameters (chapter 7, Micikevicius et al.).

    The model computes in ``bf16``/``fp16``; the optimizer owns FP32 copies.
    :meth:`step` copies the low-precision gradients into the masters, steps
    the optimizer there (where a 1e-3 change to 1.0 survives), and writes the
    rounded result back to the model.  ``make_optimizer`` receives the master
    parameters, e.g. ``lambda ps: torch.optim.SGD(ps, lr=0.1)``.
    """

    def __init__(self, params: Iterable[torch.nn.Parameter], make_optimizer):
        self.model_params = [p for p in params if p.requires_grad]
        self.master_params = [torch.nn.Parameter(p.detach().float().clone()) for p in self.model_params]
        self.optimizer = make_optimizer(self.master_params)

    @torch.no_grad()
    def step(self) -> None:
        for p, m in zip(self.model_params, self.master_params):
            m.grad = None if p.grad is None else p.grad.float()  # (same shape), now in FP32
        self.optimizer.step()
        for p, m in zip(self.model_params, self.master_params):
            p.copy_(m)  # round the FP32 result to the model's format

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the model's gradients (the masters' are rebuilt at every step)."""
        for p in self.model_params:
            p.grad = None


# --- bf16 arithmetic emulated in FP32, for CPUs without native bf16 (chapters 7 and 10) -------------

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

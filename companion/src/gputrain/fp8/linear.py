"""``Float8Linear``: an ``nn.Linear`` whose three GEMMs run in FP8, and ``convert_to_float8`` (chapter 10, part 4)."""

from __future__ import annotations

import fnmatch
import math
from typing import Callable, Iterable, Optional

import torch
import torch.nn as nn

from .formats import fp8_format
from .gemm import scaled_matmul
from .probe import emulates, fast_scaled_mm
from .products import check_fp8_capability
from .quantize import Quantized, dequantize_2d, quantize, transpose


def _requantize_t(q: Quantized, granularity: str) -> Quantized:
    """The transpose of a saved FP8 operand, scaled along its new inner dim (reused when the scales allow)."""
    if q.granularity in ("tensor", "block") and q.granularity == granularity:
        return transpose(q)
    return quantize(dequantize_2d(q).t(), q.fmt, granularity)


class _Float8Matmul(torch.autograd.Function):
    """y = x @ w.T with the layer's three GEMMs in FP8: forward, input gradient, weight gradient.

    The input is saved for backward in FP8 (DeepSeek-V3 caches activations
    so); where the weight-gradient GEMM needs it scaled along the token axis
    instead, the saved codes are rescaled.
    """

    @staticmethod
    def forward(ctx, x, weight, cfg: dict):  # x (M, K), weight (N, K)
        gran = cfg["granularity"]
        act, wgt = ("tile", "block") if gran == "block" else (gran, gran)
        qx, qw = quantize(x, cfg["fmt"], act), quantize(weight, cfg["fmt"], wgt)
        with torch.autocast(x.device.type, enabled=False):
            out = scaled_matmul(qx, qw, emulate=cfg["emulate"])  # (M, N)
        ctx.save_for_backward(qx.data, qx.scale, weight)
        ctx.meta = (cfg, x.dtype, qx.fmt, qx.granularity, qx.shape, qw if wgt in ("tensor", "block") else None)
        return out.to(cfg["out_dtype"])

    @staticmethod
    def backward(ctx, grad):  # grad (M, N)
        x_codes, x_scale, weight = ctx.saved_tensors
        cfg, x_dtype, x_fmt, x_gran, x_shape, qw = ctx.meta
        gran, emulate = cfg["granularity"], cfg["emulate"]
        act, wgt = ("tile", "block") if gran == "block" else (gran, gran)
        gx = gw = None
        with torch.autocast(grad.device.type, enabled=False):
            qg = quantize(grad, cfg["grad_fmt"], act) if ctx.needs_input_grad[0] or act == "tensor" else None
            if ctx.needs_input_grad[0]:  # dX = dY @ W: inner dim N
                qwt = transpose(qw) if qw is not None else quantize(weight.t(), cfg["fmt"], wgt)  # (K, N)
                gx = scaled_matmul(qg, qwt, emulate=emulate).to(x_dtype)  # (M, K)
            if ctx.needs_input_grad[1]:  # dW = dY^T @ X: inner dim M (tokens)
                # one tensor scale serves both orientations; finer scales must run along M instead
                qgt = transpose(qg) if act == "tensor" else quantize(grad.t(), cfg["grad_fmt"], act)  # (N, M)
                qx = Quantized(x_codes, x_scale, x_fmt, x_gran, x_shape)
                gw = scaled_matmul(qgt, _requantize_t(qx, act), emulate=emulate).to(weight.dtype)  # (N, K)
        return gx, gw, None


class Float8Linear(nn.Linear):
    """``nn.Linear`` whose three GEMMs run in FP8 (chapter 10).

    ``granularity``: ``"tensor"`` or ``"row"`` scales through
    ``torch._scaled_mm`` (real FP8 tensor cores on Ada/Hopper; a CPU kernel
    here), or ``"block"`` for DeepSeek-V3's 1x128 tiles and 128x128 blocks,
    emulated.  ``emulate``: ``None`` takes the kernel where
    :func:`fast_scaled_mm` found it fast and emulates the same FP8 products
    elsewhere; ``True`` or ``False`` forces one path.  ``fmt`` rounds inputs and weights, ``grad_fmt`` the output
    gradient (default: E5M2, the wider range, with tensor scales, as in
    Micikevicius et al. 2022; E4M3 everywhere with finer scales, as in
    DeepSeek-V3).  Parameters stay in their own dtype (the master copy);
    the output has the autocast dtype when autocast is on, else the input's.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        granularity: str = "tensor",
        fmt: str = "e4m3",
        grad_fmt: Optional[str] = None,
        emulate: Optional[bool] = None,
        device=None,
        dtype=None,
    ):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        if granularity not in ("tensor", "row", "block"):
            raise ValueError(
                f"unknown Float8Linear granularity {granularity!r}; use 'tensor', 'row' or "
                "'block' (DeepSeek-V3's 1x128 tiles and 128x128 blocks)"
            )
        self.granularity, self.emulate = granularity, emulate
        self.fmt = "e4m3" if fp8_format(fmt).exponent_bits == 4 else "e5m2"
        grad_fmt = grad_fmt or ("e5m2" if granularity == "tensor" else "e4m3")
        self.grad_fmt = "e4m3" if fp8_format(grad_fmt).exponent_bits == 4 else "e5m2"
        self.last_path = ""  # which kernel the last forward used

    @classmethod
    def from_linear(cls, linear: nn.Linear, **kwargs) -> "Float8Linear":
        """A Float8Linear that shares ``linear``'s parameters (optimizer state and weight tying survive)."""
        with torch.device("meta"):  # no new weights are allocated
            new = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, **kwargs)
        new.weight = linear.weight
        new.bias = linear.bias
        return new

    def emulated(self, device: torch.device) -> bool:
        """Whether this layer's products are emulated on ``device`` (``emulate=None``: where the kernel is slow)."""
        return self.emulate if self.emulate is not None else emulates(self.granularity, device.type)

    def path(self, device: torch.device) -> str:
        """The kernel this layer uses on ``device`` (and the error for a GPU without FP8)."""
        if self.emulated(device):
            why = (
                ""
                if self.emulate or self.granularity == "block"
                else (
                    f" (torch._scaled_mm {self.granularity}wise is "
                    f"{fast_scaled_mm(device.type).slowdown[self.granularity]:.0f}x slower here)"
                )
            )
            return f"emulated: quantize-dequantize, FP32 matmul{why}"
        if device.type == "cuda":
            check_fp8_capability(torch.cuda.get_device_capability(device), torch.cuda.get_device_name(device))
        return f"torch._scaled_mm, {self.granularity}wise scales"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.last_path = self.path(x.device)
        dev = x.device.type
        out_dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else x.dtype
        cfg = {
            "fmt": self.fmt,
            "grad_fmt": self.grad_fmt,
            "granularity": self.granularity,
            "emulate": self.emulated(x.device),
            "out_dtype": out_dtype,
        }
        y = _Float8Matmul.apply(x.reshape(math.prod(x.shape[:-1]), self.in_features), self.weight, cfg)  # (M, N)
        y = y.reshape(*x.shape[:-1], self.out_features)  # (..., N)
        return y if self.bias is None else y + self.bias.to(y.dtype)

    def extra_repr(self) -> str:
        mode = {True: "emulated", False: "_scaled_mm", None: "_scaled_mm where fast"}[
            True if self.granularity == "block" else self.emulate
        ]
        return f"{super().extra_repr()}, fp8={self.fmt}/{self.grad_fmt}, {self.granularity}, {mode}"


DEFAULT_SKIP = ("head", "*.head", "lm_head", "*.lm_head", "output", "*.output")


def convert_to_float8(
    model: nn.Module, *, skip: "Iterable[str] | Callable[[str, nn.Module], bool]" = DEFAULT_SKIP, **kwargs
) -> nn.Module:
    """Replace every ``nn.Linear`` of ``model`` by a :class:`Float8Linear` sharing its weights (chapter 10).

    ``skip``: qualified-name patterns (``fnmatch``) or a predicate ``(name,
    module) -> bool`` naming layers to keep; by default the output head.  As
    in DeepSeek-V3, only the linear layers change: embeddings, norms and the
    attention core are not ``nn.Linear`` and keep their precision.
    ``kwargs`` go to :class:`Float8Linear`.  Returns ``model``, modified in place.
    """
    skipped = skip if callable(skip) else (lambda name, _m: any(fnmatch.fnmatchcase(name, p) for p in skip))
    converted = 0
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            if type(child) is nn.Linear and not skipped(name, child):
                setattr(parent, child_name, Float8Linear.from_linear(child, **kwargs))
                converted += 1
    if converted == 0 and not float8_layers(model):
        raise ValueError(f"{type(model).__name__} has no nn.Linear left to convert; check the skip patterns")
    return model


def float8_layers(model: nn.Module) -> list[str]:
    """Qualified names of the :class:`Float8Linear` layers in ``model``."""
    return [name for name, m in model.named_modules() if isinstance(m, Float8Linear)]


def linear_operands(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, skip: Iterable[str] = DEFAULT_SKIP
) -> dict[str, dict[str, torch.Tensor]]:
    """The three FP8 GEMM operands of every ``nn.Linear`` in one training step of ``model(x, y)``.

    Returns ``{"activations": {name: X (M, K)}, "weights": {name: W (N, K)},
    "gradients": {name: dY (M, N)}}`` (detached FP32 copies), for the layers
    :func:`convert_to_float8` would convert.  The model's gradients are left as
    they were.
    """
    found: dict[str, dict[str, torch.Tensor]] = {"activations": {}, "weights": {}, "gradients": {}}
    hooks = []
    for name, mod in model.named_modules():
        if type(mod) is not nn.Linear or any(fnmatch.fnmatchcase(name, p) for p in skip):
            continue
        hooks.append(
            mod.register_forward_hook(
                lambda m, inp, out, name=name: found["activations"].__setitem__(
                    name, inp[0].detach().float().reshape(-1, inp[0].shape[-1])
                )
            )
        )
        hooks.append(
            mod.register_full_backward_hook(
                lambda m, gin, gout, name=name: found["gradients"].__setitem__(
                    name, gout[0].detach().float().reshape(-1, gout[0].shape[-1])
                )
            )
        )
        found["weights"][name] = mod.weight.detach().float().clone()
    saved = [(p, p.grad) for p in model.parameters()]
    try:
        _, loss = model(x, y)
        loss.backward()
    finally:
        for h in hooks:
            h.remove()
        for p, g in saved:
            p.grad = g
    return found

"""The engine's table of operations: each one's forward value and its local derivative rule (chapter 4).

A rule works on plain ``torch.Tensor`` numbers and knows nothing of the graph.
It returns the result and a vector-Jacobian product ``vjp``: given ``g``, the
gradient of the loss with respect to the result, ``vjp(g)`` is one gradient
per input, d(loss)/d(input) by the chain rule.  :meth:`Tensor._apply
<gputrain.autograd.tensor.Tensor._apply>` runs a rule, records it in the graph,
and sums each gradient back to its input's shape where broadcasting stretched
the input.  This is how micrograd and tinygrad are built: the class holds the
graph, a table beside it holds the calculus.  ``tests/test_autograd.py``
checks every rule against ``torch.autograd`` and central finite differences.
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence, Union

import torch

Grads = tuple[Optional[torch.Tensor], ...]
Axis = Union[int, Sequence[int], None]
Rule = Callable[..., tuple[torch.Tensor, Callable[[torch.Tensor], Grads]]]

# -- arithmetic (broadcasting like torch: Tensor._apply sums each gradient back to its input's shape) --


def add(a: torch.Tensor, b: torch.Tensor):
    return a + b, lambda g: (g, g)


def sub(a: torch.Tensor, b: torch.Tensor):
    return a - b, lambda g: (g, -g)


def mul(a: torch.Tensor, b: torch.Tensor):
    """c = a * b: the gradient reaching a is g * b, the one reaching b is g * a."""
    return a * b, lambda g: (g * b, g * a)


def div(a: torch.Tensor, b: torch.Tensor):
    return a / b, lambda g: (g / b, -g * a / (b * b))


def neg(x: torch.Tensor):
    return -x, lambda g: (-g,)


def pow(x: torch.Tensor, p: float):  # noqa: A001 (the table's name for **)
    return x**p, lambda g: (g * p * x ** (p - 1),)


def matmul(a: torch.Tensor, b: torch.Tensor):
    if a.dim() < 2 or b.dim() < 2:
        raise ValueError(
            f"matmul needs operands with >= 2 dims, got {tuple(a.shape)} @ {tuple(b.shape)}; "
            "reshape a vector to (1, n) or (n, 1)"
        )
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(
            f"matmul shapes {tuple(a.shape)} @ {tuple(b.shape)} do not chain: {a.shape[-1]} != {b.shape[-2]}"
        )
    # g: (..., n, m) for a: (..., n, k), b: (..., k, m)
    return a @ b, lambda g: (g @ b.transpose(-1, -2), a.transpose(-1, -2) @ g)  # (..., n, k), (..., k, m)


# -- shape --------------------------------------------------------------


def reshape(x: torch.Tensor, shape: tuple[int, ...]):
    old = x.shape
    return x.reshape(*shape), lambda g: (g.reshape(old),)


def transpose(x: torch.Tensor, d0: int, d1: int):
    return x.transpose(d0, d1), lambda g: (g.transpose(d0, d1),)


# -- reductions ---------------------------------------------------------


def sum(x: torch.Tensor, dims: tuple[int, ...], keepdims: bool):  # noqa: A001 (the table's name for a sum)
    shape = tuple(x.shape)
    out = x.sum(dim=dims, keepdim=keepdims) if dims else x.clone()
    return out, lambda g: (_expand_back(g, shape, dims, keepdims),)


def _dims(axis: Axis, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    for a in axes:
        if not -ndim <= a < max(ndim, 1):
            raise ValueError(f"axis {a} is out of range for a tensor with {ndim} dims")
    return tuple(sorted(a % max(ndim, 1) for a in axes))


def _expand_back(g: torch.Tensor, shape: tuple[int, ...], dims: tuple[int, ...], keepdims: bool) -> torch.Tensor:
    """Spread the gradient of a sum evenly over every summed element (each contributed with slope 1)."""
    if not keepdims:
        for d in dims:
            g = g.unsqueeze(d)
    return g.expand(shape).clone()


# -- elementwise functions -------------------------------------------------


def exp(x: torch.Tensor):
    y = x.exp()
    return y, lambda g: (g * y,)


def log(x: torch.Tensor):
    return x.log(), lambda g: (g / x,)


def tanh(x: torch.Tensor):
    y = x.tanh()
    return y, lambda g: (g * (1 - y * y),)


def sigmoid(x: torch.Tensor):
    y = torch.sigmoid(x)
    # sigma' = sigma (1 - sigma) <= 1/4: the factor behind vanishing gradients
    return y, lambda g: (g * y * (1 - y),)


def relu(x: torch.Tensor):
    return x.clamp_min(0), lambda g: (g * (x > 0).to(g.dtype),)


def gelu(x: torch.Tensor):
    """Exact GELU, x * Phi(x) with the Gaussian CDF (PyTorch's default)."""
    cdf = 0.5 * (1 + torch.erf(x / math.sqrt(2)))  # Phi(x)
    pdf = torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)  # phi(x)
    return x * cdf, lambda g: (g * (cdf + x * pdf),)


def gelu_tanh(x: torch.Tensor):
    """GELU's tanh approximation (Hendrycks & Gimpel; GPT-2's choice)."""
    c = math.sqrt(2 / math.pi)
    t = torch.tanh(c * (x + 0.044715 * x**3))
    dt = (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)  # d tanh(u) / dx
    return 0.5 * x * (1 + t), lambda g: (g * (0.5 * (1 + t) + 0.5 * x * dt),)


# -- softmax family (along one axis, numerically stable) ---------------------


def log_softmax(x: torch.Tensor, axis: int):
    z = x - x.amax(dim=axis, keepdim=True)  # shift by the max: exp never overflows
    out = z - z.exp().sum(dim=axis, keepdim=True).log()
    # d/dx_j of log softmax_i = delta_ij - softmax_j, so the VJP is g - softmax * sum(g)
    return out, lambda g: (g - out.exp() * g.sum(dim=axis, keepdim=True),)


def softmax(x: torch.Tensor, axis: int):
    s = torch.softmax(x, dim=axis)
    # Jacobian diag(s) - s s^T, applied to g without building it
    return s, lambda g: (s * (g - (g * s).sum(dim=axis, keepdim=True)),)


OPS: dict[str, Rule] = {
    rule.__name__: rule
    for rule in (add, sub, mul, div, neg, pow, matmul, reshape, transpose, sum)
    + (exp, log, tanh, sigmoid, relu, gelu, gelu_tanh, log_softmax, softmax)
}

"""The engine's :class:`Tensor`: an array that records how it was computed, and the backward pass (chapter 4).

Every :class:`Tensor` remembers the tensors it was computed from and a small
function that turns the gradient of its output into the gradients of its
inputs (a vector-Jacobian product, taken from the table in
:mod:`gputrain.autograd.ops`).  :meth:`Tensor.backward` orders the graph
topologically and walks it from the loss back to the leaves, applying the
chain rule once per node and *adding* the contributions of every path into a
node that is used more than once.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch

from . import ops
from .ops import Axis, Grads, Rule


class Tensor:
    """An array that records how it was computed, so gradients can flow back through it."""

    def __init__(
        self,
        data,
        requires_grad: bool = False,
        name: str = "",
        _parents: tuple["Tensor", ...] = (),
        _vjp: Optional[Callable[[torch.Tensor], Grads]] = None,
        _op: str = "",
    ):
        if isinstance(data, Tensor):
            raise TypeError("Tensor(data) got a Tensor; use .data to unwrap it or .detach() to copy it")
        t = data if isinstance(data, torch.Tensor) else torch.as_tensor(data)  # numpy, lists, scalars
        if not t.is_floating_point():
            t = t.to(torch.get_default_dtype())  # gradients need floats
        self.data: torch.Tensor = t.detach()
        self.requires_grad = requires_grad
        self.grad: Optional[torch.Tensor] = None
        self.name = name
        self._parents = _parents
        self._vjp = _vjp  # output gradient -> one gradient per parent (None where not needed)
        self._op = _op

    # -- basics -------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def is_leaf(self) -> bool:
        return not self._parents

    @property
    def parents(self) -> tuple["Tensor", ...]:
        """The tensors this one was computed from (empty for a leaf or a constant)."""
        return self._parents

    @property
    def op(self) -> str:
        """The name of the operation that made this tensor ("" for a leaf)."""
        return self._op

    def __repr__(self) -> str:
        label = f" name={self.name!r}" if self.name else ""
        op = f" op={self._op}" if self._op else ""
        return f"Tensor(shape={self.shape}{op}{label}, requires_grad={self.requires_grad})"

    def numpy(self):
        return self.data.detach().cpu().numpy()

    def item(self) -> float:
        return self.data.item()

    def detach(self) -> "Tensor":
        """The same numbers with no history: gradients stop here."""
        return Tensor(self.data.clone())

    def zero_grad(self) -> None:
        self.grad = None

    # -- graph construction -----------------------------------------------
    @staticmethod
    def _make(data: torch.Tensor, parents: tuple["Tensor", ...], vjp, op: str) -> "Tensor":
        # Record history only when some input wants a gradient: inference builds no graph.
        needs = any(p.requires_grad for p in parents)
        return Tensor(data, requires_grad=needs, _parents=parents if needs else (), _vjp=vjp if needs else None, _op=op)

    def _apply(self, rule: Rule, *others, op: str = "", **params) -> "Tensor":
        """Run one rule of the table on this tensor (and ``others``) and record it in the graph."""
        inputs = (self, *(as_tensor(o, like=self) for o in others))
        out, vjp = rule(*(t.data for t in inputs), **params)
        shapes = [t.shape for t in inputs]

        def back(g: torch.Tensor) -> Grads:  # a broadcast input gets the sum over the copies it made
            return tuple(unbroadcast(pg, shape) for pg, shape in zip(vjp(g), shapes))

        return Tensor._make(out, inputs, back, op or rule.__name__)

    # -- arithmetic (broadcasting like torch; gradients summed back to each input's shape) --
    def __add__(self, other) -> "Tensor":
        return self._apply(ops.add, other)

    def __sub__(self, other) -> "Tensor":
        return self._apply(ops.sub, other)

    def __mul__(self, other) -> "Tensor":
        return self._apply(ops.mul, other)

    def __truediv__(self, other) -> "Tensor":
        return self._apply(ops.div, other)

    def __neg__(self) -> "Tensor":
        return self._apply(ops.neg)

    def __pow__(self, p: float) -> "Tensor":
        if isinstance(p, Tensor):
            raise TypeError("Tensor ** Tensor is not supported; write it as (b * a.log()).exp()")
        return self._apply(ops.pow, p=p, op=f"pow{p:g}")

    def __radd__(self, other) -> "Tensor":
        return self + other

    def __rmul__(self, other) -> "Tensor":
        return self * other

    def __rsub__(self, other) -> "Tensor":
        return as_tensor(other, like=self) - self

    def __rtruediv__(self, other) -> "Tensor":
        return as_tensor(other, like=self) / self

    def __matmul__(self, other) -> "Tensor":
        return self._apply(ops.matmul, other)

    # -- shape --------------------------------------------------------------
    def reshape(self, *shape: int) -> "Tensor":
        return self._apply(ops.reshape, shape=shape)

    def transpose(self, d0: int = -2, d1: int = -1) -> "Tensor":
        return self._apply(ops.transpose, d0=d0, d1=d1)

    @property
    def T(self) -> "Tensor":
        return self.transpose(-2, -1)

    # -- reductions ---------------------------------------------------------
    def sum(self, axis: Axis = None, keepdims: bool = False) -> "Tensor":
        return self._apply(ops.sum, dims=ops._dims(axis, self.data.dim()), keepdims=keepdims)

    def mean(self, axis: Axis = None, keepdims: bool = False) -> "Tensor":
        dims = ops._dims(axis, self.data.dim())
        n = math.prod(self.shape[d] for d in dims)
        return self.sum(axis=axis, keepdims=keepdims) / n

    # -- elementwise functions -------------------------------------------------
    def exp(self) -> "Tensor":
        return self._apply(ops.exp)

    def log(self) -> "Tensor":
        return self._apply(ops.log)

    def tanh(self) -> "Tensor":
        return self._apply(ops.tanh)

    def sigmoid(self) -> "Tensor":
        return self._apply(ops.sigmoid)

    def relu(self) -> "Tensor":
        return self._apply(ops.relu)

    def gelu(self, approximate: str = "none") -> "Tensor":
        """GELU: ``"none"`` is exact, x * Phi(x); ``"tanh"`` is the tanh approximation (GPT-2)."""
        if approximate not in ("none", "tanh"):
            raise ValueError(f"gelu approximate must be 'none' or 'tanh', got {approximate!r}")
        return self._apply(ops.gelu if approximate == "none" else ops.gelu_tanh)

    # -- softmax family (along one axis, numerically stable) ---------------------
    def log_softmax(self, axis: int = -1) -> "Tensor":
        return self._apply(ops.log_softmax, axis=axis)

    def softmax(self, axis: int = -1) -> "Tensor":
        return self._apply(ops.softmax, axis=axis)

    # -- the backward pass ----------------------------------------------------
    def backward(self, gradient: Optional[torch.Tensor] = None, trace: Optional[list] = None) -> None:
        """Fill ``.grad`` of every tensor that leads here: d(self)/d(tensor), chain rule in reverse.

        Leaves accumulate into ``.grad`` across calls (as in PyTorch; call
        :func:`zero_grad` between steps); inner nodes get their gradient of
        this call.  ``trace``, if given, receives ``(tensor, gradient)`` in the
        order the backward pass finishes them (chapter 4 animates it).
        """
        if not self.requires_grad:
            raise ValueError(
                "backward() on a tensor that does not require grad; create the inputs with requires_grad=True"
            )
        if gradient is None:
            if self.data.numel() != 1:
                raise ValueError(
                    f"backward() on a non-scalar of shape {self.shape} needs a gradient of that "
                    "shape; reduce it to a scalar first (.sum() or .mean()) or pass gradient="
                )
            gradient = torch.ones_like(self.data)
        gradient = torch.as_tensor(gradient, dtype=self.data.dtype, device=self.data.device)
        if tuple(gradient.shape) != self.shape:
            raise ValueError(
                f"backward() gradient has shape {tuple(gradient.shape)} but the tensor has "
                f"shape {self.shape}; pass one gradient entry per element"
            )
        grads: dict[int, torch.Tensor] = {id(self): gradient}
        for node in reversed(topological_order(self)):  # every consumer before its inputs
            g = grads.pop(id(node), None)
            if g is None:
                continue
            if node.is_leaf:
                node.grad = g.clone() if node.grad is None else node.grad + g
            else:
                node.grad = g
            if trace is not None:
                trace.append((node, g))
            if node._vjp is None:
                continue
            for parent, pg in zip(node._parents, node._vjp(g)):
                if pg is None or not parent.requires_grad:
                    continue
                # a tensor used twice receives the sum of both paths' gradients
                grads[id(parent)] = pg if id(parent) not in grads else grads[id(parent)] + pg


def topological_order(root: Tensor) -> list[Tensor]:
    """Tensors that ``root`` depends on, each after all of its inputs (iterative: deep graphs are fine)."""
    order: list[Tensor] = []
    seen: set[int] = set()
    stack: list[tuple[Tensor, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)  # all its parents are already in `order`
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((p, False) for p in node._parents if id(p) not in seen)
    return order


def as_tensor(x, like: Optional[Tensor] = None) -> Tensor:
    """Wrap numbers, arrays and torch tensors as constants (no gradient); Tensors pass through."""
    if isinstance(x, Tensor):
        return x
    if like is None:
        return Tensor(torch.as_tensor(x))
    # straight to the partner's dtype: a Python float must not pass through float32 first
    return Tensor(torch.as_tensor(x, dtype=like.data.dtype, device=like.data.device))


def unbroadcast(g: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """Sum ``g`` back to ``shape``: the gradient of a broadcast is the sum over the copies it made."""
    while g.dim() > len(shape):  # dims broadcasting added in front
        g = g.sum(dim=0)
    for d, n in enumerate(shape):  # dims that were stretched from 1
        if n == 1 and g.shape[d] != 1:
            g = g.sum(dim=d, keepdim=True)
    return g

"""A reverse-mode automatic differentiation engine, from scratch (chapter 4).

Every :class:`Tensor` remembers the tensors it was computed from and a small
function that turns the gradient of its output into the gradients of its
inputs (a vector-Jacobian product).  :meth:`Tensor.backward` orders the graph
topologically and walks it from the loss back to the leaves, applying the
chain rule once per node and *adding* the contributions of every path into a
node that is used more than once.

The numbers live in a ``torch.Tensor`` (so the same engine runs on a GPU) but
torch's own autograd is never used: every derivative below is written out by
hand, and ``tests/test_autograd.py`` checks each one against ``torch.autograd``
and against central finite differences.

GELU comes in both forms: the exact ``x * Phi(x)`` with the Gaussian CDF
(``approximate="none"``, PyTorch's default) and the tanh approximation of
Hendrycks & Gimpel (``approximate="tanh"``, GPT-2's choice); each matches
``torch.nn.functional.gelu`` with the same ``approximate=`` setting.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Optional, Sequence, Union

import torch

from .data import digits
from .model import Activation

Grads = tuple[Optional[torch.Tensor], ...]
Axis = Union[int, Sequence[int], None]


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

    # -- arithmetic (broadcasting like torch; gradients summed back to each input's shape) --
    def __add__(self, other) -> "Tensor":
        other = as_tensor(other, like=self)
        return Tensor._make(
            self.data + other.data,
            (self, other),
            lambda g: (unbroadcast(g, self.shape), unbroadcast(g, other.shape)),
            "add",
        )

    def __sub__(self, other) -> "Tensor":
        other = as_tensor(other, like=self)
        return Tensor._make(
            self.data - other.data,
            (self, other),
            lambda g: (unbroadcast(g, self.shape), unbroadcast(-g, other.shape)),
            "sub",
        )

    def __mul__(self, other) -> "Tensor":
        other = as_tensor(other, like=self)
        return Tensor._make(
            self.data * other.data,
            (self, other),
            lambda g: (unbroadcast(g * other.data, self.shape), unbroadcast(g * self.data, other.shape)),
            "mul",
        )

    def __truediv__(self, other) -> "Tensor":
        other = as_tensor(other, like=self)
        a, b = self.data, other.data
        return Tensor._make(
            a / b,
            (self, other),
            lambda g: (unbroadcast(g / b, self.shape), unbroadcast(-g * a / (b * b), other.shape)),
            "div",
        )

    def __neg__(self) -> "Tensor":
        return Tensor._make(-self.data, (self,), lambda g: (-g,), "neg")

    def __pow__(self, p: float) -> "Tensor":
        if isinstance(p, Tensor):
            raise TypeError("Tensor ** Tensor is not supported; write it as (b * a.log()).exp()")
        x = self.data
        return Tensor._make(x**p, (self,), lambda g: (g * p * x ** (p - 1),), f"pow{p:g}")

    def __radd__(self, other) -> "Tensor":
        return self + other

    def __rmul__(self, other) -> "Tensor":
        return self * other

    def __rsub__(self, other) -> "Tensor":
        return as_tensor(other, like=self) - self

    def __rtruediv__(self, other) -> "Tensor":
        return as_tensor(other, like=self) / self

    def __matmul__(self, other) -> "Tensor":
        other = as_tensor(other, like=self)
        a, b = self.data, other.data
        if a.dim() < 2 or b.dim() < 2:
            raise ValueError(
                f"matmul needs operands with >= 2 dims, got {tuple(a.shape)} @ {tuple(b.shape)}; "
                "reshape a vector to (1, n) or (n, 1)"
            )
        if a.shape[-1] != b.shape[-2]:
            raise ValueError(
                f"matmul shapes {tuple(a.shape)} @ {tuple(b.shape)} do not chain: {a.shape[-1]} != {b.shape[-2]}"
            )

        def vjp(g):  # g: (..., n, m) for a: (..., n, k), b: (..., k, m)
            return (
                unbroadcast(g @ b.transpose(-1, -2), self.shape),  # (..., n, k)
                unbroadcast(a.transpose(-1, -2) @ g, other.shape),
            )  # (..., k, m)

        return Tensor._make(a @ b, (self, other), vjp, "matmul")

    # -- shape --------------------------------------------------------------
    def reshape(self, *shape: int) -> "Tensor":
        old = self.shape
        return Tensor._make(self.data.reshape(*shape), (self,), lambda g: (g.reshape(old),), "reshape")

    def transpose(self, d0: int = -2, d1: int = -1) -> "Tensor":
        return Tensor._make(self.data.transpose(d0, d1), (self,), lambda g: (g.transpose(d0, d1),), "transpose")

    @property
    def T(self) -> "Tensor":
        return self.transpose(-2, -1)

    # -- reductions ---------------------------------------------------------
    def sum(self, axis: Axis = None, keepdims: bool = False) -> "Tensor":
        dims = _dims(axis, self.data.dim())
        shape = self.shape
        out = self.data.sum(dim=dims, keepdim=keepdims) if dims else self.data.clone()
        return Tensor._make(out, (self,), lambda g: (_expand_back(g, shape, dims, keepdims),), "sum")

    def mean(self, axis: Axis = None, keepdims: bool = False) -> "Tensor":
        dims = _dims(axis, self.data.dim())
        n = math.prod(self.shape[d] for d in dims)
        return self.sum(axis=axis, keepdims=keepdims) / n

    # -- elementwise functions -------------------------------------------------
    def exp(self) -> "Tensor":
        y = self.data.exp()
        return Tensor._make(y, (self,), lambda g: (g * y,), "exp")

    def log(self) -> "Tensor":
        x = self.data
        return Tensor._make(x.log(), (self,), lambda g: (g / x,), "log")

    def tanh(self) -> "Tensor":
        y = self.data.tanh()
        return Tensor._make(y, (self,), lambda g: (g * (1 - y * y),), "tanh")

    def sigmoid(self) -> "Tensor":
        y = torch.sigmoid(self.data)
        # sigma' = sigma (1 - sigma) <= 1/4: the factor behind vanishing gradients
        return Tensor._make(y, (self,), lambda g: (g * y * (1 - y),), "sigmoid")

    def relu(self) -> "Tensor":
        x = self.data
        return Tensor._make(x.clamp_min(0), (self,), lambda g: (g * (x > 0).to(g.dtype),), "relu")

    def gelu(self, approximate: str = "none") -> "Tensor":
        """GELU: ``"none"`` is exact, x * Phi(x); ``"tanh"`` is the tanh approximation (GPT-2)."""
        x = self.data
        if approximate == "none":
            cdf = 0.5 * (1 + torch.erf(x / math.sqrt(2)))  # Phi(x)
            pdf = torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)  # phi(x)
            return Tensor._make(x * cdf, (self,), lambda g: (g * (cdf + x * pdf),), "gelu")
        if approximate == "tanh":
            c = math.sqrt(2 / math.pi)
            t = torch.tanh(c * (x + 0.044715 * x**3))
            dt = (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)  # d tanh(u) / dx
            return Tensor._make(
                0.5 * x * (1 + t), (self,), lambda g: (g * (0.5 * (1 + t) + 0.5 * x * dt),), "gelu_tanh"
            )
        raise ValueError(f"gelu approximate must be 'none' or 'tanh', got {approximate!r}")

    # -- softmax family (along one axis, numerically stable) ---------------------
    def log_softmax(self, axis: int = -1) -> "Tensor":
        x = self.data
        z = x - x.amax(dim=axis, keepdim=True)  # shift by the max: exp never overflows
        out = z - z.exp().sum(dim=axis, keepdim=True).log()
        # d/dx_j of log softmax_i = delta_ij - softmax_j, so the VJP is g - softmax * sum(g)
        return Tensor._make(out, (self,), lambda g: (g - out.exp() * g.sum(dim=axis, keepdim=True),), "log_softmax")

    def softmax(self, axis: int = -1) -> "Tensor":
        s = torch.softmax(self.data, dim=axis)
        # Jacobian diag(s) - s s^T, applied to g without building it
        return Tensor._make(s, (self,), lambda g: (s * (g - (g * s).sum(dim=axis, keepdim=True)),), "softmax")

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


# -- functional forms and losses ------------------------------------------------------


def exp(x: Tensor) -> Tensor:
    return x.exp()


def log(x: Tensor) -> Tensor:
    return x.log()


def tanh(x: Tensor) -> Tensor:
    return x.tanh()


def sigmoid(x: Tensor) -> Tensor:
    return x.sigmoid()


def relu(x: Tensor) -> Tensor:
    return x.relu()


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    return x.gelu(approximate)


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    return x.softmax(axis)


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    return x.log_softmax(axis)


def cross_entropy(logits: Tensor, targets: torch.Tensor) -> Tensor:
    """Mean of -log softmax(logits)[target] over the batch: logits (N, C), integer targets (N,).

    Built from the engine's own ops (log_softmax, mul, sum), so its gradient,
    (softmax - onehot) / N, comes out of the chain rule rather than being typed in.
    """
    targets = torch.as_tensor(targets, device=logits.data.device)
    if logits.data.dim() != 2 or targets.dim() != 1 or targets.shape[0] != logits.shape[0]:
        raise ValueError(
            f"cross_entropy needs logits (N, C) and targets (N,), got {logits.shape} and {tuple(targets.shape)}"
        )
    onehot = torch.nn.functional.one_hot(targets.long(), logits.shape[1]).to(logits.data.dtype)  # (N, C)
    return -(log_softmax(logits, axis=1) * onehot).sum() / logits.shape[0]


def zero_grad(params: Iterable[Tensor]) -> None:
    """Forget accumulated gradients before the next backward pass."""
    for p in params:
        p.zero_grad()


# -- a small network and its training loop -------------------------------------------------

ACTIVATIONS = ("relu", "tanh", "sigmoid", "gelu", "gelu_tanh")


class MLP:
    """Fully connected layers ``sizes[0] -> ... -> sizes[-1]`` on the engine (no activation at the end).

    Weights start like ``torch.nn.Linear`` (uniform in +-1/sqrt(fan_in)), so a
    torch copy made with :meth:`to_torch` is the same function.
    """

    def __init__(
        self,
        sizes: Sequence[int],
        activation: str = "relu",
        dtype=torch.float64,
        device: Optional[torch.device] = None,
        generator: Optional[torch.Generator] = None,
    ):
        if len(sizes) < 2 or min(sizes) < 1:
            raise ValueError(f"MLP sizes must be >= 2 positive widths, got {list(sizes)}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        self.activation = activation
        self.layers: list[tuple[Tensor, Tensor]] = []
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            bound = 1 / math.sqrt(n_in)
            w = (torch.rand(n_in, n_out, generator=generator, dtype=dtype) * 2 - 1) * bound  # (in, out)
            b = (torch.rand(n_out, generator=generator, dtype=dtype) * 2 - 1) * bound  # (out,)
            self.layers.append(
                (Tensor(w.to(device), True, name=f"W{i + 1}"), Tensor(b.to(device), True, name=f"b{i + 1}"))
            )

    def parameters(self) -> list[Tensor]:
        return [t for layer in self.layers for t in layer]

    def __call__(self, x: Tensor) -> Tensor:
        for i, (w, b) in enumerate(self.layers):
            x = x @ w + b  # (N, out): b broadcasts over the batch
            if i < len(self.layers) - 1:
                x = x.gelu("tanh") if self.activation == "gelu_tanh" else getattr(x, self.activation)()
        return x

    def to_torch(self) -> torch.nn.Sequential:
        """The same network as ``torch.nn`` modules with copied weights (for checking against torch)."""
        act = {
            "relu": torch.nn.ReLU(),
            "tanh": torch.nn.Tanh(),
            "sigmoid": torch.nn.Sigmoid(),
            "gelu": torch.nn.GELU(),
            "gelu_tanh": torch.nn.GELU(approximate="tanh"),
        }[self.activation]
        mods: list[torch.nn.Module] = []
        for i, (w, b) in enumerate(self.layers):
            lin = torch.nn.Linear(*w.shape, dtype=w.data.dtype, device=w.data.device)
            with torch.no_grad():
                lin.weight.copy_(w.data.T)  # torch stores (out, in)
                lin.bias.copy_(b.data)
            mods.append(lin)
            if i < len(self.layers) - 1:
                mods.append(act)
        return torch.nn.Sequential(*mods)


def sgd_step(params: Iterable[Tensor], lr: float) -> None:
    """Plain gradient descent on the engine's tensors: w <- w - lr * dL/dw (chapter 5 does better)."""
    if lr <= 0:
        raise ValueError(f"lr must be positive, got {lr}")
    for p in params:
        if p.grad is not None:
            p.data -= lr * p.grad


def accuracy(model: MLP, x: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of rows of ``x`` whose largest logit is the label ``y``."""
    logits = model(Tensor(x)).data  # (N, C)
    return (logits.argmax(dim=1) == y).double().mean().item()


def digits_split(
    test_fraction: float = 0.2, seed: int = 0, dtype=torch.float64, device: Optional[torch.device] = None
) -> tuple[torch.Tensor, ...]:
    """scikit-learn's 8x8 digits (:func:`gputrain.data.digits`) as ``x_train, y_train, x_test, y_test``.

    Pixels are scaled from 0..16 to [0, 1]; the split is a seeded permutation.
    """
    x, y = digits()  # (1797, 64), (1797,)
    x = x.to(dtype) / 16.0
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    n_test = int(len(y) * test_fraction)
    test, train = perm[:n_test], perm[n_test:]
    return tuple(t.to(device) for t in (x[train], y[train], x[test], y[test]))


class DigitsRun:
    """What :func:`train_digits` returns: the model, per-step losses and accuracies."""

    def __init__(self, model: MLP, losses: list[float], train_accuracy: float, test_accuracy: float):
        self.model, self.losses = model, losses
        self.train_accuracy, self.test_accuracy = train_accuracy, test_accuracy


def train_digits(
    hidden: Sequence[int] = (64,),
    activation: str = "relu",
    epochs: int = 20,
    batch_size: int = 32,
    lr: float = 0.1,
    seed: int = 0,
    dtype=torch.float64,
    device: Optional[torch.device] = None,
) -> DigitsRun:
    """Train an MLP on the digits with this engine and plain SGD; the whole loop, no torch.autograd."""
    x_tr, y_tr, x_te, y_te = digits_split(seed=seed, dtype=dtype, device=device)
    gen = torch.Generator().manual_seed(seed)
    model = MLP([64, *hidden, 10], activation, dtype=dtype, device=device, generator=gen)
    params, losses = model.parameters(), []
    for _ in range(epochs):
        order = torch.randperm(len(y_tr), generator=gen).to(y_tr.device)  # a fresh shuffle every epoch
        for i in range(0, len(order), batch_size):
            idx = order[i : i + batch_size]
            loss = cross_entropy(model(Tensor(x_tr[idx])), y_tr[idx])  # predict, measure
            zero_grad(params)
            loss.backward()  # find the direction
            sgd_step(params, lr)  # adjust a little
            losses.append(loss.item())
    return DigitsRun(model, losses, accuracy(model, x_tr, y_tr), accuracy(model, x_te, y_te))


# -- looking inside torch's autograd: what backward keeps, and what reaches each layer ------------


def saved_activation_bytes(fn: Callable[[], object], exclude: Iterable[torch.Tensor] = ()) -> int:
    """Bytes of the distinct tensors torch's autograd saves for the backward pass while ``fn()`` runs.

    Every tensor a backward formula will need passes through the pack hook of
    ``torch.autograd.graph.saved_tensors_hooks``.  Each storage counts once
    (a ReLU's output and the next layer's input are one tensor in memory) and
    the storages of ``exclude`` (pass the parameters: they exist anyway) not at all.
    """
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in skip:
            saved[ptr] = t.untyped_storage().nbytes()
        return t  # keep it as it is: we only look

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(saved.values())


class DeepMLP(torch.nn.Module):
    """``depth`` hidden layers of one width, plain ``h = f(W h + b)`` or residual ``h = h + f(W h + b)``.

    Chapter 4 uses it for vanishing and exploding gradients.  The forward pass
    keeps each hidden state (with ``retain_grad``) so that after ``backward``,
    :meth:`signal_norms` gives the norm of dL/dh at every depth: the backward
    signal each layer receives.  ``init_gain=None`` keeps PyTorch's default
    initialization; a number draws weights from N(0, gain^2 * 2 / fan_in)
    (He initialization times ``gain``) and zeroes the biases.
    """

    def __init__(
        self,
        n_in: int,
        n_out: int,
        *,
        width: int = 64,
        depth: int = 20,
        activation: str = "sigmoid",
        residual: bool = False,
        init_gain: Optional[float] = None,
    ):
        super().__init__()
        if depth < 1 or width < 1:
            raise ValueError(f"DeepMLP needs depth >= 1 and width >= 1, got depth={depth}, width={width}")
        self.residual = residual
        self.inp = torch.nn.Linear(n_in, width)
        self.hidden = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))
        self.out = torch.nn.Linear(width, n_out)
        self.act = Activation(activation)
        self.states: list[torch.Tensor] = []
        if init_gain is not None:
            for lin in (self.inp, *self.hidden, self.out):
                torch.nn.init.normal_(lin.weight, std=init_gain * math.sqrt(2 / lin.in_features))
                torch.nn.init.zeros_(lin.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.inp(x))  # (N, width)
        self.states = [h]
        for lin in self.hidden:
            # the residual path adds the layer's input back: dh_out/dh_in = I + (layer's Jacobian)
            h = h + self.act(lin(h)) if self.residual else self.act(lin(h))  # (N, width)
            self.states.append(h)
        if torch.is_grad_enabled():
            for s in self.states:
                s.retain_grad()
        return self.out(h)  # (N, n_out)

    def linears(self) -> list[torch.nn.Linear]:
        return [self.inp, *self.hidden, self.out]

    def signal_norms(self) -> list[float]:
        """||dL/dh|| for each hidden state, input side first (after a backward pass)."""
        if not self.states or self.states[0].grad is None:
            raise RuntimeError("signal_norms() needs a forward and a backward pass first")
        return [s.grad.norm().item() for s in self.states]

    def weight_grad_norms(self) -> list[float]:
        """||dL/dW|| for each linear layer, input side first (after a backward pass)."""
        return [lin.weight.grad.norm().item() for lin in self.linears()]

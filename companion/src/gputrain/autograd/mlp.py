"""A small network on the engine, and the whole training loop on scikit-learn's digits (chapter 4).

No ``torch.autograd`` anywhere: :class:`MLP` is built from the engine's
tensors, :func:`train_digits` predicts, measures with the engine's
cross-entropy, calls ``backward`` and takes plain SGD steps.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional, Sequence

import torch

from ..data import digits
from .functional import cross_entropy, zero_grad
from .tensor import Tensor

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

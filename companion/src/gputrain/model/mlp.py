"""The multilayer perceptron and its activations: chapter 2's network and a GPT block's feed-forward."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

# The activations an MLP can put between its layers.  "identity" is there on
# purpose: with it, a deep MLP is still one matrix (chapter 2 shows it).
ACTIVATIONS = ("relu", "gelu", "tanh", "sigmoid", "identity")


class Activation(nn.Module):
    """An element-wise non-linearity chosen by name; a module so hooks and printouts see it."""

    def __init__(self, name: str):
        super().__init__()
        if name not in ACTIVATIONS:
            raise ValueError(f"unknown activation {name!r}; use one of: {', '.join(ACTIVATIONS)}")
        self.name = name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.name == "identity":
            return x
        if self.name in ("tanh", "sigmoid"):
            return getattr(torch, self.name)(x)
        # F.relu / F.gelu, looked up per call; F.gelu is the exact erf form (GPT-2 used the
        # tanh approximation; they differ by at most 4.8e-4, checked in tests/test_model.py)
        return getattr(F, self.name)(x)

    def extra_repr(self) -> str:
        return self.name


class MLP(nn.Module):
    """A multilayer perceptron: ``depth`` linear layers with an activation between them (chapter 2).

    ``fc`` maps the input to ``hidden`` features, ``depth - 2`` layers in
    ``hidden`` keep that width, and ``proj`` maps to ``n_out``; no activation
    follows the last layer (its outputs are logits).  ``depth=1`` is a single
    linear layer (``fc`` straight to ``n_out``).  The same class is the
    position-wise feed-forward inside every GPT block (C -> 4C -> GELU -> C).
    """

    def __init__(
        self,
        n_in: int,
        n_out: int,
        *,
        hidden: int = 64,
        depth: int = 2,
        activation: str = "relu",
        bias: bool = True,
        dropout: float = 0.0,
    ):
        super().__init__()
        if depth < 1:
            raise ValueError(f"MLP depth must be >= 1 (the number of linear layers), got {depth}")
        self.activation = activation
        self.fc = nn.Linear(n_in, hidden if depth > 1 else n_out, bias=bias)
        self.hidden = nn.ModuleList(nn.Linear(hidden, hidden, bias=bias) for _ in range(depth - 2))
        self.proj = nn.Linear(hidden, n_out, bias=bias) if depth > 1 else None
        self.act = Activation(activation)
        self.drop = nn.Dropout(dropout)

    def linears(self) -> list[nn.Linear]:
        """The linear layers in the order the input meets them."""
        return [self.fc, *self.hidden] + ([self.proj] if self.proj is not None else [])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layers = self.linears()
        for layer in layers[:-1]:
            x = self.act(layer(x))  # (..., hidden): the non-linearity is what stops the collapse
        return self.drop(layers[-1](x))  # (..., n_out)

"""The perceptron and what one layer cannot do: XOR's ceiling and the collapse of linear stacks (chapter 2)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from .mlp import MLP


class Perceptron(nn.Module):
    """Rosenblatt's perceptron: one linear layer and a step, ``y = [w.x + b > 0]`` (chapter 2)."""

    def __init__(self, n_in: int):
        super().__init__()
        self.linear = nn.Linear(n_in, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.linear(x).squeeze(-1) > 0).long()  # (B,) labels 0 or 1

    @torch.no_grad()
    def fit(self, x: torch.Tensor, y: torch.Tensor, epochs: int = 100, lr: float = 1.0) -> list[float]:
        """Rosenblatt's rule: after each mistake, ``w += lr (y - y_hat) x``; accuracy after each epoch.

        It stops early once every example is right (which happens whenever the
        classes are linearly separable, by the perceptron convergence theorem).
        """
        if x.dim() != 2 or y.shape != x.shape[:1]:
            raise ValueError(
                f"fit expects x of shape (n, features) and y of shape (n,), got {tuple(x.shape)} and {tuple(y.shape)}"
            )
        history = []
        for _ in range(epochs):
            for xi, yi in zip(x, y):  # one example at a time, as in 1958
                err = float(yi) - float(self(xi[None])[0])  # -1, 0 or +1
                self.linear.weight += lr * err * xi  # (1, n_in) += (n_in,)
                self.linear.bias += lr * err
            history.append((self(x) == y).float().mean().item())
            if history[-1] == 1.0:
                break
        return history


def best_linear_accuracy(x: torch.Tensor, y: torch.Tensor) -> float:
    """The best accuracy any line ``w.x + b = 0`` can reach on 2-D points, found exhaustively.

    Which side of a line each point falls on depends only on the order of the
    projections ``w.x``; that order changes only at the finitely many angles
    where ``w`` is perpendicular to the difference of two points.  One angle
    inside each interval between those critical angles, and every threshold
    between consecutive projections, therefore visits every labelling a line
    can produce.  (Chapter 2 uses it to show XOR's ceiling of 3/4.)
    """
    if x.dim() != 2 or x.shape[1] != 2:
        raise ValueError(f"best_linear_accuracy enumerates lines in the plane: x must be (n, 2), got {tuple(x.shape)}")
    x, y = x.double(), y.bool()
    d = x[None, :, :] - x[:, None, :]  # (n, n, 2): pairwise differences
    i, j = torch.triu_indices(len(x), len(x), 1)
    d = d[i, j]
    d = d[d.abs().sum(1) > 0]  # identical points never change order
    crit = torch.atan2(d[:, 1], d[:, 0]) + math.pi / 2  # normal directions where two points tie
    crit = torch.cat([crit, crit + math.pi]).remainder(2 * math.pi).sort().values
    if len(crit) == 0:
        angles = torch.zeros(1, dtype=torch.float64)
    else:
        gaps = torch.diff(torch.cat([crit, crit[:1] + 2 * math.pi]))
        angles = crit + gaps / 2  # one angle strictly inside each interval
    best = 0.0
    for a in angles:
        p = x @ torch.stack([torch.cos(a), torch.sin(a)])  # (n,) projections
        v = p.unique()  # sorted
        thresholds = torch.cat([v[:1] - 1, (v[1:] + v[:-1]) / 2, v[-1:] + 1])
        acc = ((p[None, :] > thresholds[:, None]) == y).double().mean(1).max().item()
        best = max(best, acc)
    return best


def collapse_linear(layers: "MLP | list[nn.Linear]") -> nn.Linear:
    """One ``nn.Linear`` equal to a stack of linear layers with nothing between them (chapter 2).

    ``W2 (W1 x + b1) + b2 = (W2 W1) x + (W2 b1 + b2)``: the product of the
    matrices is the whole network.
    """
    if isinstance(layers, MLP):
        if layers.activation != "identity":
            raise ValueError(
                f"this MLP puts {layers.activation!r} between its layers, so it is not one matrix; "
                "only an MLP built with activation='identity' collapses"
            )
        layers = layers.linears()
    if not layers:
        raise ValueError("collapse_linear needs at least one nn.Linear")
    w = layers[0].weight.detach()  # (out_1, in)
    b = _bias(layers[0])
    for layer in layers[1:]:
        w = layer.weight.detach() @ w  # (out_k, in)
        b = layer.weight.detach() @ b + _bias(layer)  # (out_k,)
    out = nn.Linear(w.shape[1], w.shape[0], dtype=w.dtype, device=w.device)
    with torch.no_grad():
        out.weight.copy_(w)
        out.bias.copy_(b)
    return out


def _bias(layer: nn.Linear) -> torch.Tensor:
    return layer.bias.detach() if layer.bias is not None else layer.weight.new_zeros(layer.out_features)

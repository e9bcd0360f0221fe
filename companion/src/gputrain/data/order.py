"""scikit-learn's handwritten digits in shuffled or class-sorted order, and training in that order (chapter 1).

Chapter 1's forgetting experiment: the same network, the same examples, only
the order differs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .images import _sklearn


def digits() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's 1,797 handwritten digits: x (N, 64) float32 pixel values 0..16, y (N,) int64."""
    d = _sklearn("digits").load_digits()
    return torch.tensor(d.data, dtype=torch.float32), torch.tensor(d.target, dtype=torch.long)


def order_by(
    x: torch.Tensor, y: torch.Tensor, order: str, seed: int = 0, epochs: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """The stream of ``epochs`` passes over a labelled set, ``"shuffled"`` or class ``"sorted"``.

    ``"shuffled"``: every pass is a fresh seeded permutation, as a shuffling
    DataLoader gives.  ``"sorted"``: all passes over class 0 first, then all
    over class 1, and so on: ten thousand cats, then ten thousand dogs.  Both
    streams hold exactly the same examples the same number of times; only the
    order differs.  Chapter 1, "Shuffle or forget".
    """
    if order not in ("shuffled", "sorted"):
        raise ValueError(f"order must be 'shuffled' or 'sorted', got {order!r}")
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    g = torch.Generator().manual_seed(seed)
    passes = [torch.randperm(len(y), generator=g) for _ in range(epochs)]  # epochs x (N,)
    if order == "shuffled":
        idx = torch.cat(passes)
    else:
        idx = torch.cat([p[y[p] == c] for c in torch.unique(y).tolist() for p in passes])
    return x[idx], y[idx]


@torch.no_grad()
def per_class_accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, n_classes: int) -> torch.Tensor:
    """Accuracy on each class separately, a (n_classes,) tensor."""
    correct = (model(x).argmax(-1) == y).float()  # (N,)
    hits = torch.zeros(n_classes).index_add_(0, y, correct)
    return hits / torch.bincount(y, minlength=n_classes).clamp_min(1)


@dataclass
class OrderedRun:
    """Per-class test accuracy while a model trains on a stream in one fixed order."""

    steps: list[int]  # optimizer steps at each evaluation
    seen_class: list[int]  # label of the last training example seen at each evaluation
    accuracy: torch.Tensor  # (evaluations, classes) per-class test accuracy
    losses: list[float]  # training loss at every step


def train_in_order(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    x_test: torch.Tensor,
    y_test: torch.Tensor,
    *,
    batch_size: int = 16,
    lr: float = 0.1,
    eval_every: int = 5,
) -> OrderedRun:
    """Plain SGD over the stream ``(x, y)`` once, in exactly its order; per-class test accuracy as it goes.

    No shuffling happens here: the order (from :func:`order_by`) *is* the
    experiment (chapter 1, "Shuffle or forget").
    """
    n_classes = int(max(y.max(), y_test.max())) + 1
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    steps, seen, accs, losses, step = [0], [-1], [per_class_accuracy(model, x_test, y_test, n_classes)], [], 0
    for start in range(0, len(y), batch_size):
        xb, yb = x[start : start + batch_size], y[start : start + batch_size]  # (B, D), (B,)
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        step += 1
        if step % eval_every == 0 or start + batch_size >= len(y):
            steps.append(step)
            seen.append(int(yb[-1]))
            accs.append(per_class_accuracy(model, x_test, y_test, n_classes))
    return OrderedRun(steps=steps, seen_class=seen, accuracy=torch.stack(accs), losses=losses)

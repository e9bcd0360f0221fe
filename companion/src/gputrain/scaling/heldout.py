"""The held-out loss every run of the sweep is judged by (chapter 14).

The trainer's own validation pass reads the first batches of the validation
split, a few files' worth; a scaling fit compares losses a few hundredths of
a nat apart, so every run is scored on the same windows spread evenly across
the whole held-out split (the trailing 10% of the corpus, never trained on).
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Subset


def spread_indices(n: int, k: int) -> list[int]:
    """``k`` indices spread evenly over ``range(n)`` (all of them when ``k >= n``)."""
    if n <= 0:
        raise ValueError("the held-out split holds no window")
    k = min(k, n)
    return sorted({(i * n) // k for i in range(k)})


@torch.no_grad()
def heldout_loss(model, cfg, windows: int = 512, batch_size: int = 64) -> float:
    """Mean next-byte loss (nats) of ``model`` on ``windows`` evenly spread held-out windows of ``cfg``'s data."""
    from ..train import build_data

    _, val = build_data(cfg)
    loader = DataLoader(Subset(val, spread_indices(len(val), windows)), batch_size=batch_size, shuffle=False)
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for x, y in loader:
        _, loss = model(x, y)
        total += float(loss) * len(x)
        count += len(x)
    model.train(was_training)
    return total / count

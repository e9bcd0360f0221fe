"""Activation bytes per layer per rank, by Korthikanti et al.'s formula, and the size of a dropout mask here."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..launch import rank_device


def korthikanti_per_layer(
    s: int, b: int, h: int, a: int, t: int = 1, sequence: bool = False, mask_bytes: int = 1
) -> float:
    """Activation bytes per layer per rank, Korthikanti et al. (2022) table 2, no recomputation.

    Tensor parallel: sbh(10 + 24/t + 5as/(ht)); with sequence parallelism:
    sbh(34/t + 5as/(ht)).  At t = 1 both are :func:`gputrain.memory.korthikanti_activations`.
    The paper stores dropout masks in 1 byte; PyTorch's CPU dropout keeps
    them in the activation's 2 bytes: ``mask_bytes=2`` adds the difference
    (two s·b·h residual masks, replicated without SP, and the a·s²·b/t attention mask).
    """
    replicated = 0 if sequence else 10
    paper = s * b * h * (replicated + (34 - replicated) / t + 5 * a * s / (h * t))
    masks = 2 * s * b * h / (t if sequence else 1) + a * s * s * b / t
    return paper + (mask_bytes - 1) * masks


def dropout_mask_bytes(dtype: torch.dtype = torch.bfloat16) -> int:
    """Bytes per element of the mask ``F.dropout`` saves for its backward, on this rank's device."""
    x = torch.ones(8, dtype=dtype, device=rank_device(), requires_grad=True)
    sizes: list[int] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t_: sizes.append(t_.element_size()) or t_, lambda t_: t_):
        F.dropout(x, 0.5, True)
    return sizes[0]

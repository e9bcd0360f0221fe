"""Over a whole model: the balancing calls a training loop makes, and the loads it reads (chapter 9)."""

from __future__ import annotations

import torch
import torch.distributed
import torch.nn as nn

from .layer import MoE


def update_router_biases(model: nn.Module, group=None) -> int:
    """Call after every optimizer step: update each MoE layer's balancing bias; returns layers updated.

    Under ``torch.distributed`` the loads are first summed over ``group`` (the
    default group when None), so every rank judges the global batch and all
    replicas of a router keep the same bias.
    """
    layers = [m for m in model.modules() if isinstance(m, MoE)]
    if layers and torch.distributed.is_available() and torch.distributed.is_initialized():
        loads = torch.stack([m.load_since_update for m in layers])  # (layers, E)
        torch.distributed.all_reduce(loads, group=group)
        for m, load in zip(layers, loads):
            m.load_since_update.copy_(load)
    for m in layers:
        m.update_bias()
    return len(layers)


def aux_loss(model: nn.Module) -> torch.Tensor | float:
    """Sum of the auxiliary balance losses of the model's MoE layers from the last forward."""
    return sum((m.aux_loss for m in model.modules() if isinstance(m, MoE)), 0.0)


def expert_loads(model: nn.Module) -> torch.Tensor:
    """(layers, E) assignments per expert in each MoE layer's last forward."""
    return torch.stack([m.last_counts for m in model.modules() if isinstance(m, MoE)])

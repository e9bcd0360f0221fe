"""Activation checkpointing: recompute each block's insides in backward instead of storing them (chapter 7).

It is applied from outside the model: :func:`apply_activation_checkpointing`
replaces the forward of each transformer block on the instance, so the
model's code, its parameter names and its ``state_dict`` keys do not change.
"""

from __future__ import annotations

import types
from typing import Iterable, Optional

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from ..model import Block

_CKPT_FLAG = "_gputrain_checkpointed"


def _checkpointed_forward(self: nn.Module, *args, **kwargs):
    """The module's own forward, run under non-reentrant checkpointing when autograd records."""
    forward = type(self).forward
    if not torch.is_grad_enabled():  # evaluation: nothing is saved anyway
        return forward(self, *args, **kwargs)
    # Keep only the block's input; recompute its insides during backward.
    # preserve_rng_state (the default) replays dropout masks exactly.
    return checkpoint(forward, self, *args, use_reentrant=False, **kwargs)


def apply_activation_checkpointing(model: nn.Module, block_types: Optional[Iterable[type]] = None) -> nn.Module:
    """Recompute each block's activations in backward instead of storing them (chapter 7).

    Every submodule of ``model`` whose type is in ``block_types`` (default: the
    transformer :class:`gputrain.model.Block`) gets its forward run under
    ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``.  Only the
    block inputs stay alive between forward and backward; the rest is
    recomputed, which costs about one extra forward pass.  Parameter names and
    ``state_dict`` keys do not change.  Applying it twice is harmless.
    Returns ``model`` (modified in place).
    """
    block_types = (Block,) if block_types is None else tuple(block_types)
    if not block_types or not all(isinstance(t, type) and issubclass(t, nn.Module) for t in block_types):
        raise ValueError(f"block_types must be nn.Module subclasses, got {block_types!r}")
    wrapped = 0
    for module in model.modules():
        if isinstance(module, block_types) and not getattr(module, _CKPT_FLAG, False):
            # An instance attribute shadows the class's forward; nn.Module.__call__ finds it.
            module.forward = types.MethodType(_checkpointed_forward, module)
            setattr(module, _CKPT_FLAG, True)
            wrapped += 1
    if wrapped == 0 and not any(getattr(m, _CKPT_FLAG, False) for m in model.modules()):
        names = ", ".join(t.__name__ for t in block_types)
        raise ValueError(
            f"no submodule of type {names} found in {type(model).__name__}; pass the model's block class as block_types"
        )
    return model


def remove_activation_checkpointing(model: nn.Module) -> nn.Module:
    """Undo :func:`apply_activation_checkpointing` (blocks store their activations again)."""
    for module in model.modules():
        if getattr(module, _CKPT_FLAG, False):
            del module.forward
            delattr(module, _CKPT_FLAG)
    return model


def is_checkpointed(model: nn.Module) -> bool:
    """Whether any submodule of ``model`` runs under activation checkpointing."""
    return any(getattr(m, _CKPT_FLAG, False) for m in model.modules())

"""Fine-tuning memory: frozen weights cost only their storage, trainable ones the whole recipe (chapter 12).

Full fine-tuning trains every parameter, so it costs what pretraining costs
(:func:`~gputrain.memory.estimate`).  LoRA freezes the model and trains small
adapters: a frozen weight has no gradient, no master copy and no optimizer
state, and it may even be stored in fewer bits (an int4 base, QLoRA-style).
:func:`finetune_memory` adds the two parts; activations are left out (they
depend on the batch, not on which weights train).
"""

from __future__ import annotations

from typing import Optional

from .estimate import MemoryBreakdown
from .recipes import PrecisionRecipe, get_recipe, optimizer_states
from .shapes import _check_sizes


def finetune_memory(
    params: float,
    trainable: float,
    *,
    trainable_tensors: int = 0,
    precision: "str | PrecisionRecipe" = "bf16-mixed",
    optimizer: str = "adamw",
    base_bytes: Optional[float] = None,
) -> MemoryBreakdown:
    """Bytes of weights, gradients, master weights and optimizer states when ``trainable`` of ``params`` train.

    ``params`` counts every parameter (frozen and trainable); ``trainable``
    those that train (all of them for full fine-tuning, the adapters for
    LoRA), ``trainable_tensors`` the tensors they sit in (Adam keeps a 4-byte
    step count per tensor).  ``base_bytes`` is the bytes per frozen weight if
    the frozen part is stored apart from the recipe (0.5 for int4; default:
    the recipe's weight bytes).  Activations are 0 here: add
    :func:`~gputrain.memory.estimate`'s for a batch.
    """
    recipe = get_recipe(precision)
    n_states = optimizer_states(optimizer)
    _check_sizes(params=params, trainable=trainable, trainable_tensors=trainable_tensors, base_bytes=base_bytes)
    if trainable > params:
        raise ValueError(f"trainable={trainable:g} exceeds params={params:g}; params counts frozen and trainable")
    frozen = params - trainable
    base = recipe.weights if base_bytes is None else base_bytes
    grads = trainable * recipe.grads
    return MemoryBreakdown(
        parameters=frozen * base + trainable * recipe.weights,
        gradients=grads,
        master_weights=trainable * recipe.master,
        optimizer_states=trainable * n_states * recipe.optimizer_state
        + (4 * trainable_tensors if n_states == 2 else 0),
        activations=0.0,
        phases={"gradients": grads},
        settings={
            "params": params,
            "trainable": trainable,
            "precision": recipe.name,
            "optimizer": optimizer,
            "base_bytes": base,
        },
    )

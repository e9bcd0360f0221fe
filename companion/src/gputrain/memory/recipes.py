"""Precision recipes: how many bytes each kind of training state takes (chapter 7; FP8 rows, chapter 10).

:data:`RECIPES` is the one table of recipes that the estimator, the layout
planner and the command line read; :data:`OPTIMIZER_STATES` counts the
buffers each optimizer keeps per parameter.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PrecisionRecipe:
    """How many bytes each kind of training state takes under one precision recipe (chapter 7).

    The FP8 recipes (chapter 10) are two more rows of :data:`RECIPES`; a recipe
    of one's own can be passed to :func:`estimate` as an instance.
    """

    name: str
    weights: float  # bytes per parameter of the weights the model holds
    grads: float  # bytes per parameter of the gradients
    master: float  # bytes per parameter of a separate FP32 master copy (0: the weights are the master)
    optimizer_state: float  # bytes per element of each optimizer state (Adam's m and v)
    activations: float  # bytes per saved activation element inside matmul-heavy ops
    residual: float  # bytes per element of the residual stream and LayerNorm inputs
    weight_cast: float = 0.0  # bytes per matmul weight of low-precision copies saved for backward (autocast)
    note: str = ""  # where the recipe comes from

    def __post_init__(self) -> None:
        for name in ("weights", "grads", "master", "optimizer_state", "activations", "residual", "weight_cast"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"PrecisionRecipe.{name} must be >= 0, got {getattr(self, name)}")

    def bytes_per_param(self, optimizer: str = "adam") -> float:
        """Persistent bytes per parameter: weights + grads + master + optimizer states."""
        return self.weights + self.grads + self.master + optimizer_states(optimizer) * self.optimizer_state


# One row per recipe; the columns are weights, grads, master, optimizer_state, activations, residual
# (bytes per value), as PrecisionRecipe names them.
# fmt: off
RECIPES: dict[str, PrecisionRecipe] = {r.name: r for r in (
    PrecisionRecipe("fp32", 4, 4, 0, 4, 4, 4, note="everything in FP32"),
    PrecisionRecipe("tf32", 4, 4, 0, 4, 4, 4, note="FP32 storage; tensor cores round matmul inputs to TF32"),
    PrecisionRecipe("bf16-mixed", 2, 2, 4, 4, 2, 2,
                    note="16-bit weights, grads, activations; FP32 master + Adam states (ZeRO, Megatron)"),
    PrecisionRecipe("fp16-mixed", 2, 2, 4, 4, 2, 2, note="as bf16-mixed, plus a loss scale (Micikevicius et al.)"),
    PrecisionRecipe("bf16-autocast", 4, 4, 0, 4, 2, 4, weight_cast=2,
                    note="torch.autocast / Accelerate mixed_precision='bf16': FP32 params are the master"),
    PrecisionRecipe("fp16-autocast", 4, 4, 0, 4, 2, 4, weight_cast=2,
                    note="torch.autocast / Accelerate mixed_precision='fp16' (+ GradScaler)"),
    PrecisionRecipe("bf16-pure", 2, 2, 0, 2, 2, 2, note="everything in BF16, no master (small updates are lost)"),
    # FP8 (chapter 10)
    PrecisionRecipe("fp8-autocast", 4, 4, 0, 4, 2, 4, weight_cast=1,
                    note="FP32 params under bf16 autocast, FP8 copies for the GEMMs (torchao, Accelerate 'fp8')"),
    PrecisionRecipe("fp8-deepseek-v3", 1, 4, 4, 2, 1, 2,
                    note="our reading of DeepSeek-V3 §3.3: FP8 GEMM weights and cached activations, "
                         "FP32 master weights and gradients, BF16 Adam moments"),
)}
# fmt: on

# buffers per parameter; Muon keeps one for its matrices (its embeddings and norms, on AdamW, keep two)
OPTIMIZER_STATES = {"sgd": 0, "momentum": 1, "rmsprop": 1, "adagrad": 1, "muon": 1, "adam": 2, "adamw": 2}


def optimizer_states(optimizer: str) -> int:
    """Tensors of optimizer state per parameter tensor: Adam keeps two (m and v), SGD none."""
    key = optimizer.lower()
    if key not in OPTIMIZER_STATES:
        raise ValueError(f"unknown optimizer {optimizer!r}; use one of: {', '.join(OPTIMIZER_STATES)}")
    return OPTIMIZER_STATES[key]


def get_recipe(recipe: "str | PrecisionRecipe") -> PrecisionRecipe:
    """The recipe named ``recipe`` in :data:`RECIPES`; a :class:`PrecisionRecipe` passes through unchanged."""
    if isinstance(recipe, PrecisionRecipe):
        return recipe
    if recipe not in RECIPES:
        raise ValueError(f"unknown precision recipe {recipe!r}; use one of: {', '.join(RECIPES)}")
    return RECIPES[recipe]

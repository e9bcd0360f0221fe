"""The estimator: bytes per GPU of one training step, by component, before anything is allocated (chapter 7).

:func:`estimate` adds parameters, gradients, master weights, optimizer states
(from a :mod:`~gputrain.memory.recipes` row, sharded by a ZeRO stage) and
activations (from :mod:`~gputrain.memory.activations`); its
:class:`MemoryBreakdown` also predicts the peak of a step, which comes at one
of four moments of the backward pass.

The package re-exports the function as ``gputrain.memory.estimate``, which
hides this module's name there; import the module itself with
``importlib.import_module("gputrain.memory.estimate")``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .activations import (
    ACTIVATION_MODELS,
    gpt_activations,
    gpt_layer_activations,
    korthikanti_activations,
    recomputed_block_bytes,
)
from .recipes import PrecisionRecipe, get_recipe, optimizer_states
from .shapes import ModelShape, _check_sizes, shape_of

COMPONENTS = ("parameters", "gradients", "master_weights", "optimizer_states", "activations")


@dataclass
class MemoryBreakdown:
    """Bytes per GPU (per data-parallel rank) for one training step, by component."""

    parameters: float
    gradients: float
    master_weights: float
    optimizer_states: float
    activations: float  # saved for backward by the forward pass
    activation_parts: dict[str, float] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)  # bytes above ``static`` at moments of a step
    settings: dict[str, object] = field(default_factory=dict)

    @property
    def static(self) -> float:
        """Bytes that live across steps: everything but activations and gradients."""
        return self.parameters + self.master_weights + self.optimizer_states

    @property
    def total(self) -> float:
        """The usual sum of the five components (what papers quote; :attr:`peak` is what a step hits)."""
        return self.static + self.gradients + self.activations

    @property
    def peak(self) -> float:
        """Predicted peak of allocated memory in a step with ``zero_grad(set_to_none=True)``.

        Gradients are born while activations die, so instead of the sum the
        peak is ``static`` plus the largest of :attr:`phases`.
        """
        return self.static + max(self.phases.values())

    def as_dict(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in COMPONENTS} | {"total": self.total, "peak": self.peak}

    def table(self, unit: float = 1e9, unit_name: str = "GB") -> str:
        """A plain-text table of the components, in ``unit_name`` (default GB = 1e9 bytes)."""
        rows = [(name.replace("_", " "), getattr(self, name)) for name in COMPONENTS]
        rows += [("total", self.total), ("peak (one step)", self.peak)]
        width = max(len(r[0]) for r in rows)
        return "\n".join(f"{name:<{width}}  {value / unit:12,.3f} {unit_name}" for name, value in rows)


def _gpt_phases(
    shape: ModelShape, recipe: PrecisionRecipe, tokens: int, parts: dict[str, float], grads: float, checkpointing: bool
) -> dict[str, float]:
    """Bytes above ``static`` at four moments of a step of our GPT (which one peaks depends on the shape)."""
    h, V, R = shape.n_embd, shape.vocab_size, recipe.residual
    logits = tokens * V * recipe.activations  # returned by forward, held by the caller
    saved = sum(parts.values())
    # nll_loss and log_softmax backward each make an FP32 (tokens, V) gradient
    start = logits + saved + tokens * V * 8
    # by the time the blocks' backward runs, the loss's log-probabilities, the head's input (and its
    # autocast weight copy) and the final LayerNorm's input and statistics have been used and freed
    done = (
        parts["cross-entropy (FP32 log-probs)"]
        + tokens * (h * recipe.activations + h * R + 2 * R)
        + recipe.weight_cast * V * h
    )
    top, bottom = _block_backward(shape, recipe, tokens, logits + saved - done, checkpointing)
    # with master weights, the step also makes FP32 copies of the gradients for the masters
    step = grads + (shape.params * 4 if recipe.master else 0)
    return {
        "start of backward": start,
        "backward of the top block": top,
        "backward of the bottom block": bottom,
        "optimizer step": step,
    }


def _block_backward(
    shape: ModelShape, recipe: PrecisionRecipe, tokens: int, held: float, checkpointing: bool
) -> tuple[float, float]:
    """Bytes above ``static`` inside the backward of the top block and of the bottom block.

    ``held``: the logits and what forward saved that is still needed.  The
    moment is the GELU's backward, when the MLP's output projection has its
    weight gradient and two 4h-wide gradients exist.  Going down one block
    frees what that block kept (its activations; under checkpointing only its input) and
    leaves its parameters' gradients behind, so the memory of block ``i``'s
    backward is linear in ``i``: its maximum is at the top block (many
    tokens, few parameters) or at the bottom one (few tokens, many
    parameters: the gradients of every block above already exist).
    """
    h, V, L = shape.n_embd, shape.vocab_size, shape.n_layer
    if checkpointing:
        kept = h * recipe.residual * tokens  # a block's input
    else:
        kept = sum(gpt_layer_activations(shape, recipe).values()) * tokens + recipe.weight_cast * 12 * h * h
    # the head's gradient and the output projection's exist; the projection's input (4h wide) is freed and
    # GELU's backward turns one 4h-wide gradient into another, next to the residual stream's gradient
    top = (
        held + (V * h + 4 * h * h + (h if shape.bias else 0)) * recipe.grads + tokens * h * (4 * recipe.activations + 4)
    )
    if checkpointing:
        top += recomputed_block_bytes(shape, recipe, tokens)  # the block rebuilt
    bottom = top + (L - 1) * (shape.layer_params * recipe.grads - kept)
    return top, bottom


def _check_settings(zero_stage, dp, batch_size, seq_len, activation_model) -> None:
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage!r}")
    if not isinstance(dp, int) or dp < 1:
        raise ValueError(f"dp (data-parallel degree) must be an integer >= 1, got {dp!r}")
    _check_sizes(batch_size=batch_size, seq_len=seq_len)
    if activation_model not in ACTIVATION_MODELS:
        raise ValueError(f"activation_model={activation_model!r} is not one of: {', '.join(ACTIVATION_MODELS)}")


def _activations_and_phases(
    shape: Optional[ModelShape],
    recipe: PrecisionRecipe,
    batch_size: int,
    seq_len: Optional[int],
    grads: float,
    checkpointing: bool,
    activation_model: str,
) -> tuple[dict[str, float], dict[str, float]]:
    """Activation bytes by part, and the phases of a step (one phase where there is no GPT graph to follow)."""
    if shape is None or not batch_size:  # a bare parameter count, or no tokens: no activations
        return {}, {"activations and gradients together": grads}
    s = seq_len if seq_len is not None else shape.block_size
    if activation_model == "korthikanti":
        mode = "full" if checkpointing else "none"
        # the formula counts 16-bit activations; FP32 activations take twice the bytes
        blocks = korthikanti_activations(s, batch_size, shape.n_embd, shape.n_head, shape.n_layer, recompute=mode)
        blocks = blocks * recipe.activations / 2
        return {"blocks": blocks}, {"activations and gradients together": blocks + grads}
    if s > shape.block_size:
        raise ValueError(f"seq_len={s} exceeds the model's block_size={shape.block_size}")
    parts = gpt_activations(shape, recipe, batch_size, s, checkpointing)
    return parts, _gpt_phases(shape, recipe, batch_size * s, parts, grads, checkpointing)


def _read_model(model, activation_model: str) -> tuple[Optional[ModelShape], float, int]:
    """(shape, parameters, parameter tensors) of a parameter count (no shape), a ModelShape, a GPTConfig or a GPT."""
    if isinstance(model, (int, float)):
        _check_sizes(params=model)
        return None, float(model), 0
    shape = shape_of(model)
    if getattr(getattr(model, "cfg", model), "dropout", 0.0) and activation_model == "gputrain":
        raise ValueError(
            "the gputrain activation model assumes dropout=0 (no masks); "
            "use activation_model='korthikanti' or a model with dropout=0"
        )
    return shape, shape.params, shape.param_tensors


def estimate(
    model,
    *,
    batch_size: int = 1,
    seq_len: Optional[int] = None,
    precision: "str | PrecisionRecipe" = "bf16-mixed",
    optimizer: str = "adam",
    activation_checkpointing: bool = False,
    zero_stage: int = 0,
    dp: int = 1,
    activation_model: str = "gputrain",
) -> MemoryBreakdown:
    """Bytes per GPU of training ``model`` (chapter 7; per-rank ZeRO memory in chapter 8).

    ``model``: a parameter count (no activations then), a ``ModelShape``, a
    ``GPTConfig`` or a ``GPT``.  ``batch_size`` is the micro-batch per rank,
    ``seq_len`` defaults to the model's context.  ZeRO (Rajbhandari et al.):
    stage 1 shards master weights and optimizer states over ``dp`` ranks,
    stage 2 also gradients, stage 3 also the parameters.  Activations follow
    our GPT's autograd graph (``activation_model="gputrain"``) or Korthikanti
    et al.'s formula (``"korthikanti"``, full recomputation when checkpointing;
    scaled by ``activations / 2`` for recipes whose activations are not 16-bit).
    """
    recipe = get_recipe(precision)
    n_states = optimizer_states(optimizer)
    _check_settings(zero_stage, dp, batch_size, seq_len, activation_model)
    shape, psi, n_tensors = _read_model(model, activation_model)
    shard = {k: (dp if zero_stage >= k else 1) for k in (1, 2, 3)}
    states = psi * n_states * recipe.optimizer_state + (4 * n_tensors if n_states == 2 else 0)  # Adam's step
    grads = psi * recipe.grads / shard[2]
    parts, phases = _activations_and_phases(
        shape, recipe, batch_size, seq_len, grads, activation_checkpointing, activation_model
    )
    acts = float(sum(parts.values()))
    return MemoryBreakdown(
        parameters=psi * recipe.weights / shard[3],
        gradients=grads,
        master_weights=psi * recipe.master / shard[1],
        optimizer_states=states / shard[1],
        activations=acts,
        activation_parts=parts,
        phases=phases,
        settings={
            "params": psi,
            "precision": recipe.name,
            "optimizer": optimizer,
            "batch_size": batch_size,
            "seq_len": seq_len,
            "activation_checkpointing": activation_checkpointing,
            "zero_stage": zero_stage,
            "dp": dp,
            "activation_model": activation_model,
        },
    )

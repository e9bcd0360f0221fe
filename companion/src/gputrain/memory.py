"""Where training memory goes, and how to get it back (chapter 7).

* :func:`estimate` predicts the bytes of parameters, gradients, master
  weights, optimizer states and activations for a GPT-style model under a
  precision recipe, an optimizer, activation checkpointing and a ZeRO stage.
* :func:`measure_step` and :class:`AllocationTracker` measure the same
  components of a real training step, so the two can be compared.
* :func:`apply_activation_checkpointing` trades compute for memory from the
  outside: the model's code is unchanged.
"""

from __future__ import annotations

import types
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterable, Optional

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.checkpoint import checkpoint

from .model import Block, gpt_num_params

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


# --- precision recipes: bytes per parameter and per activation ------------------------------------


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
# how estimate() counts activations: name -> what it counts (the CLI offers these names)
ACTIVATION_MODELS = {
    "gputrain": "the tensors our GPT's autograd graph saves, phase by phase (chapter 7)",
    "korthikanti": "Korthikanti et al.'s per-layer formula for a Megatron GPT",
}


def optimizer_states(optimizer: str) -> int:
    """Tensors of optimizer state per parameter tensor: Adam keeps two (m and v), SGD none."""
    key = optimizer.lower()
    if key not in OPTIMIZER_STATES:
        raise ValueError(f"unknown optimizer {optimizer!r}; use one of: {', '.join(OPTIMIZER_STATES)}")
    return OPTIMIZER_STATES[key]


def get_recipe(recipe: "str | PrecisionRecipe") -> PrecisionRecipe:
    if isinstance(recipe, PrecisionRecipe):
        return recipe
    if recipe not in RECIPES:
        raise ValueError(f"unknown precision recipe {recipe!r}; use one of: {', '.join(RECIPES)}")
    return RECIPES[recipe]


# --- model shapes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    """The shape of a GPT-style decoder; enough to count its parameters and activations."""

    n_layer: int  # transformer blocks L
    n_embd: int  # hidden width h
    n_head: int  # attention heads a
    vocab_size: int  # V
    block_size: int  # longest context (positions with an embedding)
    params_override: Optional[float] = None  # a published parameter count, used instead of the formula
    bias: bool = True  # biases in Linear and LayerNorm layers, as GPTConfig.bias

    def __post_init__(self) -> None:
        for name in ("n_layer", "n_embd", "n_head", "vocab_size", "block_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"ModelShape.{name} must be >= 1, got {getattr(self, name)}")

    def is_moe_layer(self, layer: int) -> bool:
        """Always False: a ModelShape is a dense GPT (``gpt_num_params`` asks, as of a ``GPTConfig``)."""
        return False

    @property
    def layer_params(self) -> int:
        h = self.n_embd  # qkv 3h²+3h, proj h²+h, fc 4h²+4h, proj 4h²+h, two LayerNorms 4h; without bias 2h gains
        return 12 * h * h + (13 * h if self.bias else 2 * h)

    @property
    def matmul_weights(self) -> int:
        """Elements of the weight matrices that matmuls read (cast by autocast): blocks + tied head."""
        return 12 * self.n_embd**2 * self.n_layer + self.vocab_size * self.n_embd

    @property
    def params(self) -> float:
        if self.params_override is not None:
            return self.params_override
        return gpt_num_params(self)  # tied token embedding/head V·h, positions T·h, blocks, final LayerNorm

    @property
    def param_tensors(self) -> int:
        # each block 6 weights (4 matrices, 2 LayerNorm gains) + 6 biases; wte, wpe, ln_f weight (+ bias)
        return (12 if self.bias else 6) * self.n_layer + (4 if self.bias else 3)


GPT2_SMALL = ModelShape(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, block_size=1024)
GPT3_175B = ModelShape(n_layer=96, n_embd=12288, n_head=96, vocab_size=50257, block_size=2048, params_override=175e9)


def shape_of(model) -> ModelShape:
    """A :class:`ModelShape` from a ``GPTConfig``, a ``GPT`` or a ``ModelShape``."""
    if isinstance(model, ModelShape):
        return model
    cfg = getattr(model, "cfg", model)
    if getattr(cfg, "n_experts", 0):  # a dense shape would silently drop every routed expert
        raise ValueError(
            "this GPT has mixture-of-experts blocks; count it with "
            "memory.expert_parallel_memory(memory.moe_shape(cfg), ...) (chapter 9)"
        )
    try:
        return ModelShape(
            n_layer=cfg.n_layer,
            n_embd=cfg.n_embd,
            n_head=cfg.n_head,
            vocab_size=cfg.vocab_size,
            block_size=cfg.block_size,
            bias=getattr(cfg, "bias", True),
        )
    except AttributeError:
        raise ValueError(
            f"cannot read a GPT shape from {type(model).__name__}; pass a GPTConfig, "
            "a gputrain GPT, a ModelShape or a parameter count"
        ) from None


# --- generation: the KV cache ---------------------------------------------------------------------


def kv_cache_bytes(model, tokens: Optional[int] = None, batch_size: int = 1, bytes_per_value: float = 2) -> float:
    """Bytes of the keys and values a generating GPT keeps: ``2 * layers * tokens * width * bytes`` per sequence.

    Every block keeps one key and one value of width C per token
    (:class:`gputrain.model.KVCache`); ``tokens`` defaults to the model's
    context.  Chapter 7 checks the formula against the cache's tensors.
    """
    shape = shape_of(model)
    tokens = shape.block_size if tokens is None else tokens
    _check_sizes(tokens=tokens, batch_size=batch_size, bytes_per_value=bytes_per_value)
    return 2 * shape.n_layer * tokens * shape.n_embd * bytes_per_value * batch_size


# --- activations ----------------------------------------------------------------------------------


def korthikanti_activations(s: int, b: int, h: int, a: int, n_layer: int = 1, recompute: str = "none") -> float:
    """Activation bytes of a transformer per Korthikanti et al. (2022), equations (1)-(2) and section 5.

    ``none``: s·b·h·(34 + 5·a·s/h) per layer (16-bit activations, 1-byte
    dropout masks, the a·s² attention matrix stored); ``selective``: the
    attention matrix recomputed, 34·s·b·h; ``full``: only each layer's input
    kept, 2·s·b·h.  Times ``n_layer``.
    """
    _check_sizes(s=s, b=b, h=h, a=a, n_layer=n_layer)
    per_layer = {"none": s * b * h * (34 + 5 * a * s / h), "selective": 34 * s * b * h, "full": 2 * s * b * h}
    if recompute not in per_layer:
        raise ValueError(f"recompute must be one of none, selective, full; got {recompute!r}")
    return per_layer[recompute] * n_layer


def gpt_layer_activations(shape: ModelShape, recipe: PrecisionRecipe) -> dict[str, float]:
    """Bytes one block of :class:`gputrain.model.GPT` saves for backward, per token, by tensor.

    Read off the autograd graph (see chapter 7's table): the LayerNorm inputs
    and statistics, the matmul inputs, q/k/v (views of one buffer), the
    attention output and its log-sum-exp (fused SDPA: no s×s matrix; its
    output is laid out so that ``transpose(1, 2).contiguous()`` copies
    nothing, so the out-projection saves the same buffer), the GELU input
    and output.  Assumes dropout = 0 (no masks).
    """
    h, a, A, R = shape.n_embd, shape.n_head, recipe.activations, recipe.residual
    return {
        "LayerNorm inputs (2)": 2 * h * R,
        "LayerNorm mean, rstd (2×2)": 4 * R,
        "qkv matmul input": h * A,
        "q, k, v (one buffer)": 3 * h * A,
        "attention output = out-projection input": h * A,
        "attention log-sum-exp (FP32)": 4 * a,
        "MLP fc input": h * A,
        "GELU input": 4 * h * A,
        "MLP proj input": 4 * h * A,
    }


def gpt_activations(
    shape: ModelShape, recipe: PrecisionRecipe, batch_size: int, seq_len: int, checkpointing: bool = False
) -> dict[str, float]:
    """Bytes saved for backward by one forward of :class:`gputrain.model.GPT`, by part (chapter 7).

    With ``checkpointing`` each block keeps only its input (see
    :func:`recomputed_block_bytes` for what comes back during backward).
    """
    tokens = batch_size * seq_len
    h, V, L, R = shape.n_embd, shape.vocab_size, shape.n_layer, recipe.residual
    parts = {}
    if checkpointing:
        parts["blocks (inputs kept)"] = L * h * R * tokens
    else:
        parts["blocks"] = L * sum(gpt_layer_activations(shape, recipe).values()) * tokens
    # token ids (int64) and positions, final LayerNorm input and stats, head input,
    # FP32 log-probabilities and targets of the cross-entropy
    parts["embeddings, final norm, head"] = tokens * (8 + h * R + 2 * R + h * recipe.activations) + 8 * seq_len
    parts["cross-entropy (FP32 log-probs)"] = tokens * (4 * V + 8) + 4  # + the loss weight (a scalar)
    if recipe.weight_cast:  # checkpointed blocks cast again when recomputed; the head's cast stays
        parts["weight casts (autocast)"] = recipe.weight_cast * (V * h if checkpointing else shape.matmul_weights)
    return parts


def recomputed_block_bytes(shape: ModelShape, recipe: PrecisionRecipe, tokens: int) -> float:
    """Activations of one block rebuilt during backward under checkpointing (and its weight casts).

    The block's input is not rebuilt: it is the tensor the checkpoint kept, and
    the first LayerNorm saves that same storage again.
    """
    h = shape.n_embd
    rebuilt = sum(gpt_layer_activations(shape, recipe).values()) - h * recipe.residual
    return rebuilt * tokens + recipe.weight_cast * 12 * h * h


# --- the estimator --------------------------------------------------------------------------------

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


def _check_sizes(**sizes) -> None:
    for name, value in sizes.items():
        if value is None:
            continue
        if value < 0 or value != value:
            raise ValueError(f"{name} must be >= 0, got {value}")


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
    shape: ModelShape,
    recipe: PrecisionRecipe,
    batch_size: int,
    seq_len: Optional[int],
    grads: float,
    checkpointing: bool,
    activation_model: str,
):
    """Activation bytes by part, and the phases of a step (none for Korthikanti et al.'s formula)."""
    s = seq_len if seq_len is not None else shape.block_size
    if activation_model == "korthikanti":
        mode = "full" if checkpointing else "none"
        # the formula counts 16-bit activations; FP32 activations take twice the bytes
        blocks = korthikanti_activations(s, batch_size, shape.n_embd, shape.n_head, shape.n_layer, recompute=mode)
        return {"blocks": blocks * recipe.activations / 2}, {}
    if s > shape.block_size:
        raise ValueError(f"seq_len={s} exceeds the model's block_size={shape.block_size}")
    parts = gpt_activations(shape, recipe, batch_size, s, checkpointing)
    return parts, _gpt_phases(shape, recipe, batch_size * s, parts, grads, checkpointing)


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
    shape, n_tensors = None, 0
    if isinstance(model, (int, float)):
        _check_sizes(params=model)
        psi = float(model)
    else:
        shape = shape_of(model)
        psi = shape.params
        n_tensors = shape.param_tensors
        if getattr(getattr(model, "cfg", model), "dropout", 0.0) and activation_model == "gputrain":
            raise ValueError(
                "the gputrain activation model assumes dropout=0 (no masks); "
                "use activation_model='korthikanti' or a model with dropout=0"
            )

    shard = {k: (dp if zero_stage >= k else 1) for k in (1, 2, 3)}
    states = psi * n_states * recipe.optimizer_state + (4 * n_tensors if n_states == 2 else 0)  # Adam's step
    grads = psi * recipe.grads / shard[2]
    parts, phases = {}, {}
    if shape is not None and batch_size > 0:
        parts, phases = _activations_and_phases(
            shape, recipe, batch_size, seq_len, grads, activation_checkpointing, activation_model
        )
    acts = float(sum(parts.values()))
    if not phases:
        phases = {"activations and gradients together": acts + grads}
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


# --- measurement ----------------------------------------------------------------------------------


def _storages(tensors: Iterable[torch.Tensor]) -> dict[int, int]:
    """Distinct storages (data pointer -> bytes): views and shared buffers count once."""
    out: dict[int, int] = {}
    for t in tensors:
        st = t.untyped_storage()
        out[st.data_ptr()] = st.nbytes()
    return out


@contextmanager
def saved_tensors(exclude: Iterable[torch.Tensor] = ()):
    """Record the distinct storages autograd saves for backward inside the block.

    Yields a dict (data pointer -> bytes) filled as the forward runs.
    Storages of ``exclude`` (pass the parameters) are left out: they exist
    anyway.  q, k and v, which are views of one buffer, count once.
    """
    skip = set(_storages(exclude))
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        if st.data_ptr() not in skip:
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield seen


class AllocationTracker(TorchDispatchMode):
    """Live and peak bytes of the tensor storages created while it is active.

    A CPU stand-in for ``torch.cuda.max_memory_allocated`` (it works on any
    device): every operator's fresh outputs are counted when created and
    uncounted when their storage is freed.  Tensors that existed before
    (parameters, optimizer states) are not counted.
    """

    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0
        self._sizes: dict[int, int] = {}

    def _free(self, key: int) -> None:
        self.live -= self._sizes.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {
            t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)
        }
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            st = t.untyped_storage()
            key, size = st.data_ptr(), st.nbytes()
            if key in inputs or key in self._sizes or size == 0:  # a view or in-place result
                continue
            self._sizes[key] = size
            self.live += size
            weakref.finalize(st, self._free, key)  # fires when the storage itself dies
        self.peak = max(self.peak, self.live)
        return out


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind ``tensors``."""
    return sum(_storages(tensors).values())


def held_bytes(model: nn.Module, optimizer) -> int:
    """Bytes a training run holds between steps: parameters, master weights and optimizer states.

    ``optimizer`` is a torch optimizer or a :class:`gputrain.precision.MasterWeights`.
    """
    torch_optimizer = getattr(optimizer, "optimizer", optimizer)
    masters = list(getattr(optimizer, "master_params", []))
    return tensor_bytes(list(model.parameters()) + masters + _state_tensors(torch_optimizer))


def measure_step(
    model: nn.Module, optimizer, x: torch.Tensor, y: torch.Tensor, autocast_dtype: Optional[torch.dtype] = None
) -> dict[str, int]:
    """Measure one training step of ``model`` (called as ``model(x, y) -> (logits, loss)``), in bytes.

    ``optimizer`` is a torch optimizer or a :class:`gputrain.precision.MasterWeights`.
    Returns parameters, gradients, master weights and optimizer states as held
    after the step, activations as the storages saved for backward, and
    ``peak``: the most allocated at once, counting everything that existed
    before the step too (params, master weights, optimizer states).
    """
    params = list(model.parameters())
    masters = list(getattr(optimizer, "master_params", []))
    torch_optimizer = getattr(optimizer, "optimizer", optimizer)
    optimizer.zero_grad(set_to_none=True)
    before = held_bytes(model, optimizer)
    with AllocationTracker() as tracker:
        with torch.autocast(x.device.type, dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
            with saved_tensors(exclude=params) as saved:
                _, loss = model(x, y)
        activations = sum(saved.values())
        loss.backward()
        gradients = tensor_bytes(p.grad for p in params if p.grad is not None)
        optimizer.step()
    return {
        "parameters": tensor_bytes(params),
        "gradients": gradients,
        "master_weights": tensor_bytes(masters),
        "optimizer_states": tensor_bytes(_state_tensors(torch_optimizer)),
        "activations": activations,
        "peak": before + tracker.peak,
    }


def _state_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [t for st in optimizer.state.values() for t in st.values() if isinstance(t, torch.Tensor)]


# --- mixture of experts under expert parallelism (chapter 9) -------------------------------------


@dataclass(frozen=True, kw_only=True)
class MoEShape:
    """A mixture-of-experts decoder's parameters, grouped by where expert parallelism puts them (chapter 9).

    *Routed* experts are split over the EP ranks; everything else (attention,
    norms, routers, shared experts, dense blocks, embeddings) is *replicated*
    on every data-parallel rank.  The attribute names of the shape
    (``n_layer``, ``n_embd``, ...) are those of ``GPTConfig``, so the layout
    planner reads either.  Build one with :func:`moe_shape` (our GPT) or
    :func:`deepseek_v3_shape`.
    """

    name: str = "MoE"
    n_layer: int  # main-model blocks L
    n_embd: int  # hidden width C
    n_head: int  # attention heads
    vocab_size: int
    block_size: int  # training sequence length
    moe_layers: tuple[bool, ...]  # which blocks are MoE
    dense_layer: int  # parameters of one dense block
    moe_replicated: int  # parameters of one MoE block outside its routed experts
    expert: int  # parameters of one routed expert
    n_experts: int  # routed experts E per MoE block
    top_k: int  # routed experts per token
    embedding: int  # parameters before the first block (token and position embeddings)
    head: int  # parameters after the last block (final norm; an untied output head)
    tied: bool = True  # head tied to the embedding (then the embedding does the head's arithmetic)
    extra_last: int = 0  # replicated parameters of modules after the head (DeepSeek-V3's MTP module)
    extra_last_moe: int = 0  # MoE blocks in those modules
    attn_width: int = 0  # width of q·k and a·v per token for FLOPs (0: n_embd)

    def __post_init__(self) -> None:
        if len(self.moe_layers) != self.n_layer:
            raise ValueError(f"moe_layers has {len(self.moe_layers)} entries for {self.n_layer} layers")
        if not 1 <= self.top_k <= self.n_experts:
            raise ValueError(f"top_k={self.top_k} must be between 1 and n_experts={self.n_experts}")

    def layer(self, i: int) -> tuple[int, int]:
        """(replicated, routed) parameters of block ``i``."""
        if self.moe_layers[i]:
            return self.moe_replicated, self.n_experts * self.expert
        return self.dense_layer, 0

    @property
    def routed(self) -> int:
        """Parameters of every routed expert (main model and extra modules)."""
        return (sum(self.moe_layers) + self.extra_last_moe) * self.n_experts * self.expert

    @property
    def params(self) -> int:
        moe_extra = self.extra_last_moe * (self.moe_replicated + self.n_experts * self.expert)
        return (
            self.embedding
            + self.head
            + sum(sum(self.layer(i)) for i in range(self.n_layer))
            + self.extra_last
            + moe_extra
        )

    @property
    def active(self) -> int:
        """Parameters that do arithmetic for one token: top_k routed experts per MoE block; no lookup table."""
        idle = (sum(self.moe_layers) + self.extra_last_moe) * (self.n_experts - self.top_k) * self.expert
        return self.params - idle - (0 if self.tied else self.embedding)


def moe_shape(cfg) -> MoEShape:
    """The :class:`MoEShape` of a :class:`gputrain.model.GPT` built from ``cfg`` (a GPTConfig with ``n_experts``)."""
    if not getattr(cfg, "n_experts", 0):
        raise ValueError("moe_shape needs a GPTConfig with n_experts > 0; dense models use shape_of")
    from .moe import moe_layer_params

    C, mcfg = cfg.n_embd, cfg.moe_config()
    dense = 12 * C * C + (13 * C if cfg.bias else 2 * C)
    expert = 2 * C * mcfg.expert_hidden + ((mcfg.expert_hidden + C) if cfg.bias else 0)
    moe_total, _ = moe_layer_params(mcfg)
    mlp = 8 * C * C + (5 * C if cfg.bias else 0)  # the dense MLP an MoE block replaces
    return MoEShape(
        name="MoE GPT",
        n_layer=cfg.n_layer,
        n_embd=C,
        n_head=cfg.n_head,
        vocab_size=cfg.vocab_size,
        block_size=cfg.block_size,
        moe_layers=tuple(cfg.is_moe_layer(i) for i in range(cfg.n_layer)),
        dense_layer=dense,
        moe_replicated=dense - mlp + moe_total - mcfg.n_experts * expert,
        expert=expert,
        n_experts=mcfg.n_experts,
        top_k=mcfg.top_k,
        embedding=(cfg.vocab_size + cfg.block_size) * C,
        head=2 * C if cfg.bias else C,
    )


def deepseek_v3_shape(config: Optional[dict] = None, seq_len: int = 4096) -> MoEShape:
    """DeepSeek-V3 as a :class:`MoEShape`, every count taken from :func:`gputrain.moe.deepseek_v3_params`.

    The per-block counts are differences of that function on shortened
    configurations (0 or 1 layers), so the totals agree with it exactly; the
    multi-token-prediction module (one MoE block plus a projection) sits after
    the head, on the last pipeline stage, as in the report.
    """
    from .moe import DEEPSEEK_V3, deepseek_v3_params

    c = dict(DEEPSEEK_V3 if config is None else config)
    count = lambda **kw: deepseek_v3_params(dict(c, **kw))["total"]  # noqa: E731
    base = count(n_layers=0, first_dense=0)  # embedding, head, final norm
    dense, moe_block = count(n_layers=1, first_dense=1) - base, count(n_layers=1, first_dense=0) - base
    h, E = c["hidden"], c["n_routed"]
    expert = 3 * h * c["expert_ffn"]  # SwiGLU: gate, up, down
    mtp = deepseek_v3_params(c)["mtp"]
    return MoEShape(
        name="DeepSeek-V3",
        n_layer=c["n_layers"],
        n_embd=h,
        n_head=c["n_heads"],
        vocab_size=c["vocab"],
        block_size=seq_len,
        moe_layers=tuple(i >= c["first_dense"] for i in range(c["n_layers"])),
        dense_layer=dense,
        moe_replicated=moe_block - E * expert,
        expert=expert,
        n_experts=E,
        top_k=c["top_k"],
        embedding=c["vocab"] * h,
        head=base - c["vocab"] * h,
        tied=False,
        extra_last=c["mtp_modules"] * (mtp - moe_block),
        extra_last_moe=c["mtp_modules"],
        attn_width=c["n_heads"] * (c["qk_nope_head_dim"] + c["qk_rope_head_dim"] + c["v_head_dim"]) // 2,
    )


def stage_params(shape: MoEShape, pp: int = 1, stage: int = 0) -> dict[str, int]:
    """Replicated and routed parameters, and MoE blocks, of pipeline ``stage`` of ``pp`` (layers split evenly)."""
    if not 1 <= pp <= shape.n_layer or not 0 <= stage < pp:
        raise ValueError(f"need 1 <= pp <= {shape.n_layer} layers and 0 <= stage < pp; got pp={pp}, stage={stage}")
    base, extra = divmod(shape.n_layer, pp)  # the first `extra` stages get one layer more
    start = stage * base + min(stage, extra)
    layers = range(start, start + base + (stage < extra))
    replicated = sum(shape.layer(i)[0] for i in layers) + (shape.embedding if stage == 0 else 0)
    routed = sum(shape.layer(i)[1] for i in layers)
    n_moe = sum(shape.moe_layers[i] for i in layers)
    if stage == pp - 1:  # the head and the extra (MTP) modules live with the last block
        replicated += shape.head + shape.extra_last + shape.extra_last_moe * shape.moe_replicated
        routed += shape.extra_last_moe * shape.n_experts * shape.expert
        n_moe += shape.extra_last_moe
    return {"replicated": replicated, "routed": routed, "layers": len(layers), "moe_layers": n_moe}


def _states(params: float, recipe: PrecisionRecipe, n_states: int, zero_stage: int, shards: int) -> tuple:
    """(weights, gradients, master + optimizer states) bytes of ``params`` under ZeRO over ``shards`` ranks."""
    shard = {k: (shards if zero_stage >= k else 1) for k in (1, 2, 3)}
    optim = params * (recipe.master + n_states * recipe.optimizer_state) / shard[1]
    return params * recipe.weights / shard[3], params * recipe.grads / shard[2], optim


def expert_parallel_memory(
    shape: MoEShape,
    *,
    ep: int = 1,
    dp: int = 1,
    pp: int = 1,
    stage: int = 0,
    tp: int = 1,
    zero_stage: int = 1,
    precision: "str | PrecisionRecipe" = "bf16-mixed",
    optimizer: str = "adam",
    tokens: int = 0,
    in_flight: int = 1,
    a2a_bytes: Optional[float] = None,
    activation_bytes: float = 0.0,
) -> dict[str, float]:
    """Bytes per GPU of an MoE model under expert x data x pipeline (x tensor) parallelism (chapter 9).

    ``dp`` data-parallel ranks hold each pipeline stage; ``ep`` of them (EP
    ranks are carved out of the DP ranks, as in DeepSeek-V3) split each MoE
    block's routed experts, so a GPU holds ``E / ep`` experts and the same
    experts recur on ``dp / ep`` ranks.  ZeRO shards the replicated part's
    states over ``dp`` and the experts' over ``dp / ep``.  Everything is divided
    by ``tp``.  ``tokens``: tokens a GPU routes per micro-batch; each MoE block
    keeps a dispatch buffer (the N·k rows it received) and a combine buffer
    (the N·k rows it sent back), ``a2a_bytes`` per value (default: the
    recipe's activation bytes), for ``in_flight`` micro-batches.
    ``activation_bytes``: every other saved activation, bytes per token per block.
    """
    recipe, n_states = get_recipe(precision), optimizer_states(optimizer)
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage!r}")
    if tokens < 0:
        raise ValueError(f"tokens must be >= 0, got {tokens}")
    for name, value in (("ep", ep), ("dp", dp), ("tp", tp), ("in_flight", in_flight)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if shape.n_experts % ep:
        raise ValueError(
            f"{shape.n_experts} experts do not split evenly over EP{ep}; "
            f"use an EP degree that divides {shape.n_experts}"
        )
    if dp % ep:
        raise ValueError(
            f"EP{ep} does not divide DP{dp}: expert-parallel ranks are carved out of the "
            "data-parallel ranks; pick an EP degree that divides the DP degree"
        )
    part = stage_params(shape, pp, stage)
    rep = _states(part["replicated"] / tp, recipe, n_states, zero_stage, dp)
    exp = _states(part["routed"] / (ep * tp), recipe, n_states, zero_stage, dp // ep)
    a2a = recipe.activations if a2a_bytes is None else a2a_bytes
    buffers = 2 * tokens * shape.top_k * shape.n_embd * a2a * part["moe_layers"] * in_flight / tp
    return {
        "replicated weights": rep[0],
        "replicated gradients": rep[1],
        "replicated optimizer": rep[2],
        "expert weights": exp[0],
        "expert gradients": exp[1],
        "expert optimizer": exp[2],
        "all-to-all buffers": buffers,
        "activations": activation_bytes * tokens * part["layers"] * in_flight,
    }

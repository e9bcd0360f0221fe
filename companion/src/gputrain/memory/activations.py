"""The activations a forward pass saves for backward, counted two ways (chapter 7).

:func:`korthikanti_activations` is Korthikanti et al.'s per-layer formula for
a Megatron GPT; :func:`gpt_activations` reads the tensors that our own GPT's
autograd graph saves, tensor by tensor.  The estimator offers both by the
names in :data:`ACTIVATION_MODELS`.
"""

from __future__ import annotations

from .recipes import PrecisionRecipe
from .shapes import ModelShape, _check_sizes

# how estimate() counts activations: name -> what it counts (the CLI offers these names)
ACTIVATION_MODELS = {
    "gputrain": "the tensors our GPT's autograd graph saves, phase by phase (chapter 7)",
    "korthikanti": "Korthikanti et al.'s per-layer formula for a Megatron GPT",
}


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

"""Model shapes: the sizes of a GPT-style decoder that its memory depends on (chapter 7).

A :class:`ModelShape` counts parameters without building the model, so the
estimator can size GPT-3 on a laptop; :func:`shape_of` reads one from a
``GPTConfig`` or a ``GPT``; :func:`kv_cache_bytes` sizes what generation keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..model import gpt_num_params


def _check_sizes(**sizes) -> None:
    """Refuse a negative or NaN size with one line that names it (``None`` means: not given)."""
    for name, value in sizes.items():
        if value is None:
            continue
        if value < 0 or value != value:
            raise ValueError(f"{name} must be >= 0, got {value}")


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
    kv_heads: Optional[int] = None  # heads that keep keys and values (grouped-query attention); None: n_head

    def __post_init__(self) -> None:
        for name in ("n_layer", "n_embd", "n_head", "vocab_size", "block_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"ModelShape.{name} must be >= 1, got {getattr(self, name)}")
        if self.kv_heads is not None and not 1 <= self.kv_heads <= self.n_head:
            raise ValueError(f"ModelShape.kv_heads must be 1 to n_head={self.n_head}, got {self.kv_heads}")

    @property
    def kv_width(self) -> float:
        """Values per token per block in each of the key and value caches: C, or C x kv_heads / n_head."""
        return self.n_embd if self.kv_heads is None else self.n_embd * self.kv_heads / self.n_head

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
    context.  Chapter 7 checks the formula against the cache's tensors.  A
    shape with grouped-query attention (``kv_heads``) keeps only its key and
    value heads: width C x kv_heads / n_head.
    """
    shape = shape_of(model)
    tokens = shape.block_size if tokens is None else tokens
    _check_sizes(tokens=tokens, batch_size=batch_size, bytes_per_value=bytes_per_value)
    return 2 * shape.n_layer * tokens * shape.kv_width * bytes_per_value * batch_size

"""A dense GPT block's forward pass as the list of operations it runs, each with its FLOPs and bytes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from .cost import OpCost, _check_sizes
from .operations import attention_naive, attention_tiled, gelu, layernorm, matmul

if TYPE_CHECKING:  # only for the annotation: roofline reads a GPT's shape, never builds one
    from ..model import GPTConfig


def gpt_matmuls(cfg: "GPTConfig", tokens: int, itemsize: int = 2) -> list[OpCost]:
    """The matrix products of one dense GPT block and the LM head, for ``tokens`` = batch x sequence rows."""
    _check_sizes(tokens=tokens)
    c, v, bias = cfg.n_embd, cfg.vocab_size, cfg.bias
    shapes = [
        ("QKV projection", c, 3 * c, bias),
        ("attention output", c, c, bias),
        ("MLP up", c, 4 * c, bias),
        ("MLP down", 4 * c, c, bias),
        ("LM head", c, v, False),
    ]
    return [matmul(tokens, k, n, itemsize, b, name=f"{label} ({tokens}x{k} @ {k}x{n})") for label, k, n, b in shapes]


def gpt_operations(
    cfg: "GPTConfig", batch: int, seq_len: Optional[int] = None, itemsize: int = 2, block: Optional[int] = None
) -> list[OpCost]:
    """Every operation of one dense GPT block's forward pass, then the LM head, in the order they run.

    Attention is :func:`attention_naive`, or :func:`attention_tiled` with a
    ``block`` of queries.  ``seq_len`` defaults to the model's context.
    """
    t = seq_len or cfg.block_size
    _check_sizes(batch=batch, seq_len=t)
    rows, c, h = batch * t, cfg.n_embd, cfg.n_head
    qkv, proj, up, down, head = gpt_matmuls(cfg, rows, itemsize)
    attn = (
        attention_naive(batch, h, t, c // h, itemsize)
        if block is None
        else attention_tiled(batch, h, t, c // h, block, itemsize)
    )
    return [
        layernorm(rows, c, itemsize),
        qkv,
        attn,
        proj,
        layernorm(rows, c, itemsize),
        up,
        gelu(rows * 4 * c, itemsize),
        down,
        head,
    ]

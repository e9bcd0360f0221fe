"""Counting a GPT for scaling laws (chapter 14): parameters three ways, FLOPs per token and per run.

A scaling law is a curve through points (N, D, loss), so what N counts
matters.  For the book's GPT (a 256-byte vocabulary, tied head) a shape has

* ``total``: every parameter, as Chinchilla counts them (Hoffmann et al. 2022);
* ``non_embedding``: without the token and position tables, as Kaplan et
  al. 2020 count them;
* ``flops``: the weights of the linear layers (the tied head once), the N of
  the ``6N`` rule (:func:`gputrain.flops.matmul_params`).

Training FLOPs per token are ``6 N + 12 L T C`` (:func:`gputrain.flops.train_flops_per_token`):
the ``6N`` rule plus the attention scores and their mixing, full T x T as PaLM counts it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..flops import train_flops_per_token
from ..model import GPTConfig, gpt_num_params

COUNTS = ("total", "non_embedding", "flops")  # the three ways of counting N


@dataclass(frozen=True)
class Shape:
    """One model size of the sweep: depth, width and heads of the book's GPT."""

    n_layer: int  # transformer blocks L
    n_embd: int  # residual width C
    n_head: int  # attention heads (C must divide by it)

    def gpt_config(self, block_size: int, vocab_size: int = 256) -> GPTConfig:
        return GPTConfig(
            vocab_size=vocab_size, block_size=block_size, n_layer=self.n_layer, n_head=self.n_head, n_embd=self.n_embd
        )

    @property
    def label(self) -> str:
        return f"{self.n_layer}x{self.n_embd}"


def parameter_counts(cfg: GPTConfig) -> dict[str, int]:
    """N counted three ways (see the module's docstring) for a dense GPT with a tied head."""
    if not getattr(cfg, "tie_embeddings", True):
        raise ValueError("parameter_counts expects a tied head (tie_embeddings=True), as the sweep trains")
    total = gpt_num_params(cfg)
    embedding = cfg.vocab_size * cfg.n_embd + cfg.block_size * cfg.n_embd
    flops_n = 12 * cfg.n_layer * cfg.n_embd**2 + cfg.vocab_size * cfg.n_embd
    return {"total": total, "non_embedding": total - embedding, "flops": flops_n}


def flops_per_token(cfg: GPTConfig, seq_len: int | None = None) -> int:
    """Training FLOPs per token of a GPT shape: ``6 N + 12 L T C`` with N its linear weights."""
    n = parameter_counts(cfg)["flops"]
    return train_flops_per_token(n, cfg.n_layer, seq_len or cfg.block_size, cfg.n_embd)


def attention_share(cfg: GPTConfig, seq_len: int | None = None) -> float:
    """The part of the training FLOPs that the ``12 L T C`` attention term adds to ``6N``."""
    T = seq_len or cfg.block_size
    return 12 * cfg.n_layer * T * cfg.n_embd / flops_per_token(cfg, T)


def run_flops(cfg: GPTConfig, tokens: float, seq_len: int | None = None) -> float:
    """Training FLOPs of a run that sees ``tokens`` tokens: ``C = (6N + 12LTC) D``."""
    if not tokens >= 0:
        raise ValueError(f"tokens must be a count >= 0, got {tokens}")
    return float(flops_per_token(cfg, seq_len)) * tokens


def tokens_per_parameter(tokens: float, counts: dict[str, int]) -> dict[str, float]:
    """D / N for each way of counting N: the ratio a rule like Chinchilla's 20 refers to."""
    return {k: tokens / counts[k] for k in COUNTS}

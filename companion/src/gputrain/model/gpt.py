"""The GPT: embeddings, blocks, a tied head, the loss, and sampling with or without a KV cache."""

from __future__ import annotations

import math
from typing import Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import moe
from .blocks import Block
from .cache import KVCache
from .config import GPTConfig


class GPT(nn.Module):
    """A GPT-2-style decoder: token + position embeddings, blocks, an output head tied to the embedding."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.head.weight = self.wte.weight  # weight tying: one matrix reads and writes tokens
        self._mark_lookup_tables()
        self.apply(self._init_weights)
        # GPT-2: scale the residual projections by 1/sqrt(2 * n_layer)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    def _mark_lookup_tables(self) -> None:
        # rows read per token or position, not matrices applied to an input: optim.Muon leaves them to AdamW
        for table in (self.wte.weight, self.wpe.weight):
            table.lookup_table = True

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        self._mark_lookup_tables()  # copy.deepcopy and pickle make new Parameter objects, without the mark

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def hidden(self, idx: torch.Tensor, cache: "KVCache | None" = None) -> torch.Tensor:
        """The final normalized residual stream, before the output head: (B, T, C).

        With a :class:`KVCache` the tokens ``idx`` continue the ones already in
        it: their positions start at ``cache.length``, and the cache keeps their
        keys and values for the next call.
        """
        B, T = idx.shape
        if cache is None and T > self.cfg.block_size:
            raise ValueError(
                f"sequence length {T} exceeds the model's context block_size={self.cfg.block_size}; "
                "crop the input or build the model with a larger block_size"
            )
        start = 0 if cache is None else cache.length
        if cache is not None and start + T > cache.capacity:
            raise ValueError(
                f"{start} cached + {T} new tokens exceed the KV cache's capacity of {cache.capacity} "
                f"(the model's context is {self.cfg.block_size}); crop the input or reset the cache"
            )
        pos = torch.arange(start, start + T, device=idx.device)  # (T,)
        x = self.drop(self.wte(idx) + self.wpe(pos))  # (B, T, C)
        for i, block in enumerate(self.blocks):
            x = block(x) if cache is None else block(x, cache.layers[i])  # (B, T, C)
        if cache is not None:
            cache.length += T
        return self.ln_f(x)  # (B, T, C)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None, cache: "KVCache | None" = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits (B, T, V) and, when ``targets`` (B, T) are given, the mean cross-entropy.

        ``cache``: continue the tokens held in a :class:`KVCache` (generation, chapter 6).
        """
        logits = self.head(self.hidden(idx, cache))  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
            if self.cfg.n_experts:
                loss = loss + moe.aux_loss(self)  # zero unless balance="aux"
        return logits, loss

    @torch.no_grad()
    def next_logits(self, window: torch.Tensor, new: int, cache: "KVCache | None" = None) -> torch.Tensor:
        """Logits (B, V) of the token after ``window`` (B, <= block_size), whose last ``new`` tokens are new.

        Without a cache the whole window runs again.  With one, only the new
        tokens run, unless the window has just slid past the context: then
        every token sits at a new position (the position embeddings are
        absolute), so the cached keys and values are stale and the cache is
        refilled from the window.  Either way the logits are those of the
        model on the window.
        """
        if cache is not None and cache.length + new > window.size(1):  # it holds tokens the window dropped
            cache.reset()  # the window slid: every position moved
            new = window.size(1)
        run = window if cache is None else window[:, -new:]  # (B, T') the tokens that go through the blocks
        return self.head(self.hidden(run, cache)[:, -1])  # (B, V): only the last position is needed

    @torch.no_grad()
    def stream(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
        use_cache: bool = True,
    ) -> Iterator[torch.Tensor]:
        """Yield ``max_new_tokens`` sampled tokens (B, 1), one at a time, after the prompt ``idx`` (B, T).

        The model sees at most its last ``block_size`` tokens, as in training.
        ``use_cache`` keeps a :class:`KVCache`, so each step runs one token
        instead of the whole window; the samples are the same (chapter 6).
        """
        window = idx[:, -self.cfg.block_size :]  # (B, <=block_size)
        p = next(self.parameters())
        cache = KVCache(self.cfg, len(idx), device=p.device, dtype=p.dtype) if use_cache else None
        new = window.size(1)
        for _ in range(max_new_tokens):
            logits = self.next_logits(window, new, cache).float() / max(temperature, 1e-6)  # (B, V)
            if top_k is not None:
                kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            nxt = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)  # (B, 1)
            yield nxt
            window, new = torch.cat([window, nxt], dim=1)[:, -self.cfg.block_size :], 1

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, **sampling) -> torch.Tensor:
        """The prompt ``idx`` (B, T) and ``max_new_tokens`` sampled tokens after it: (B, T + max_new_tokens).

        ``sampling``: ``temperature``, ``top_k``, ``generator``, ``use_cache``, as for :meth:`stream`.
        """
        return torch.cat([idx, *self.stream(idx, max_new_tokens, **sampling)], dim=1)

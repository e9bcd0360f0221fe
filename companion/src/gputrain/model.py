"""Models: the forward pass (chapter 2).

Single-device code only: precision, FP8 and parallelism are applied from the
outside by wrappers (:mod:`gputrain.memory`, :mod:`gputrain.fp8`,
:mod:`gputrain.parallel`).  Shapes use B = batch, T = sequence length,
C = embedding width, H = heads, V = vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import moe

ATTENTIONS = ("sdpa", "flash-triton")  # GPTConfig.attention: torch's SDPA, or gputrain.kernels.flash_attention


@dataclass(kw_only=True)
class GPTConfig:
    vocab_size: int = 256  # tokens the model can read and predict
    block_size: int = 128  # longest context (positions) the model can see
    n_layer: int = 4  # transformer blocks
    n_head: int = 4  # attention heads per block
    n_embd: int = 128  # width C of the residual stream
    dropout: float = 0.0  # dropout probability in attention and MLP outputs
    bias: bool = True  # biases in Linear and LayerNorm layers (GPT-2 has them)
    attention: str = "sdpa"  # "sdpa" (torch's fused attention) or "flash-triton" (chapter 11's kernel, no dropout)
    tie_embeddings: bool = True  # the output head reuses the token embedding matrix (GPT-2); False: its own
    # mixture of experts (chapter 9); n_experts=0 keeps every block dense
    n_experts: int = 0  # routed experts per MoE block
    n_shared_experts: int = 1  # always-on shared experts per MoE block
    top_k: int = 2  # routed experts each token uses
    expert_hidden: int = 0  # hidden width of one expert; 0: 4C // (top_k + n_shared_experts), dense-sized
    router: str = "sigmoid"  # "sigmoid" (DeepSeek-V3) or "softmax" (Switch/GShard)
    routed_scaling: float = 1.0  # sigmoid router: gate multiplier after normalization
    capacity_factor: float | None = None  # None: dropless; else each expert takes ceil(cf*N*k/E)
    balance: str = "bias"  # "none", "aux" (auxiliary loss) or "bias" (aux-loss-free)
    aux_loss_weight: float = 0.01  # alpha of the auxiliary balance loss
    bias_gamma: float = 1e-3  # step of the aux-loss-free bias (moe.update_router_biases)
    moe_first_dense: int = 0  # the first blocks stay dense (DeepSeek-V3: 3)
    moe_every: int = 1  # after those, every moe_every-th block is MoE
    n_expert_groups: int = 1  # node-limited routing: expert groups ("nodes")
    topk_expert_groups: int = 1  # groups a token may use

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            if getattr(self, name) < 1:
                raise ValueError(f"GPTConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.n_embd % self.n_head:
            raise ValueError(
                f"GPTConfig.n_embd={self.n_embd} is not divisible by n_head={self.n_head}; "
                "pick n_embd as a multiple of n_head"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"GPTConfig.dropout must be in [0, 1), got {self.dropout}")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"GPTConfig.attention must be one of {ATTENTIONS}, got {self.attention!r}")
        if self.attention == "flash-triton" and self.dropout:
            raise ValueError("GPTConfig.attention='flash-triton' has no dropout; set dropout=0 or use 'sdpa'")
        if self.n_experts < 0 or self.moe_every < 1 or self.moe_first_dense < 0:
            raise ValueError(
                "GPTConfig needs n_experts >= 0 (0: dense), moe_every >= 1, moe_first_dense >= 0; "
                f"got {self.n_experts}, {self.moe_every}, {self.moe_first_dense}"
            )
        if self.n_experts:
            self.moe_config()  # validates top_k, router, balance, capacity_factor, groups

    def moe_config(self) -> "moe.MoEConfig":
        """The :class:`gputrain.moe.MoEConfig` of this model's MoE blocks."""
        hidden = self.expert_hidden or 4 * self.n_embd // (self.top_k + self.n_shared_experts)
        return moe.MoEConfig(
            dim=self.n_embd,
            n_experts=self.n_experts,
            top_k=self.top_k,
            expert_hidden=hidden,
            n_shared=self.n_shared_experts,
            router=self.router,
            routed_scaling=self.routed_scaling,
            capacity_factor=self.capacity_factor,
            balance=self.balance,
            aux_loss_weight=self.aux_loss_weight,
            bias_gamma=self.bias_gamma,
            n_groups=self.n_expert_groups,
            topk_groups=self.topk_expert_groups,
            bias=self.bias,
        )

    def is_moe_layer(self, layer: int) -> bool:
        """Whether block ``layer`` (0-based) has a mixture of experts instead of a dense MLP."""
        return (
            self.n_experts > 0
            and layer >= self.moe_first_dense
            and (layer - self.moe_first_dense) % self.moe_every == 0
        )


class CausalSelfAttention(nn.Module):
    """Multi-head attention where position t sees positions <= t, via SDPA."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = cfg.dropout
        self.attention = cfg.attention
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, kv: "LayerCache | None" = None) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)  # 3 x (B, T, C)
        # (B, T, C) -> (B, H, T, C/H): each head attends in its own subspace
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        mask, causal = None, True
        if kv is not None:  # generation: the new tokens' queries meet every key so far
            k, v = kv.store(k, v)  # (B, H, S, C/H), S = cached + T
            if T == 1:
                causal = False  # one query, the newest position: it may see every key
            elif k.size(2) > T:  # several new tokens after cached ones: query i sees keys <= S - T + i
                causal = False
                mask = torch.ones(T, k.size(2), dtype=torch.bool, device=x.device).tril(k.size(2) - T)
        # softmax(q k^T / sqrt(d)) v with a causal mask; flash kernel on GPUs
        if self.attention == "flash-triton" and causal and mask is None:  # chapter 11's kernel (square causal)
            from .kernels import flash_attention  # imported here: the kernels sit below the model

            y = flash_attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)  # (B, H, T, C/H)
        else:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=causal, dropout_p=self.dropout if self.training else 0.0
            )  # (B, H, T, C/H)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.resid_drop(self.proj(y))


# The activations an MLP can put between its layers.  "identity" is there on
# purpose: with it, a deep MLP is still one matrix (chapter 2 shows it).
ACTIVATIONS = ("relu", "gelu", "tanh", "sigmoid", "identity")


class Activation(nn.Module):
    """An element-wise non-linearity chosen by name; a module so hooks and printouts see it."""

    def __init__(self, name: str):
        super().__init__()
        if name not in ACTIVATIONS:
            raise ValueError(f"unknown activation {name!r}; use one of: {', '.join(ACTIVATIONS)}")
        self.name = name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.name == "identity":
            return x
        if self.name in ("tanh", "sigmoid"):
            return getattr(torch, self.name)(x)
        # F.relu / F.gelu, looked up per call; F.gelu is the exact erf form (GPT-2 used the
        # tanh approximation; they differ by at most 4.8e-4, checked in tests/test_model.py)
        return getattr(F, self.name)(x)

    def extra_repr(self) -> str:
        return self.name


class MLP(nn.Module):
    """A multilayer perceptron: ``depth`` linear layers with an activation between them (chapter 2).

    ``fc`` maps the input to ``hidden`` features, ``depth - 2`` layers in
    ``hidden`` keep that width, and ``proj`` maps to ``n_out``; no activation
    follows the last layer (its outputs are logits).  ``depth=1`` is a single
    linear layer (``fc`` straight to ``n_out``).  The same class is the
    position-wise feed-forward inside every GPT block (C -> 4C -> GELU -> C).
    """

    def __init__(
        self,
        n_in: int,
        n_out: int,
        *,
        hidden: int = 64,
        depth: int = 2,
        activation: str = "relu",
        bias: bool = True,
        dropout: float = 0.0,
    ):
        super().__init__()
        if depth < 1:
            raise ValueError(f"MLP depth must be >= 1 (the number of linear layers), got {depth}")
        self.activation = activation
        self.fc = nn.Linear(n_in, hidden if depth > 1 else n_out, bias=bias)
        self.hidden = nn.ModuleList(nn.Linear(hidden, hidden, bias=bias) for _ in range(depth - 2))
        self.proj = nn.Linear(hidden, n_out, bias=bias) if depth > 1 else None
        self.act = Activation(activation)
        self.drop = nn.Dropout(dropout)

    def linears(self) -> list[nn.Linear]:
        """The linear layers in the order the input meets them."""
        return [self.fc, *self.hidden] + ([self.proj] if self.proj is not None else [])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layers = self.linears()
        for layer in layers[:-1]:
            x = self.act(layer(x))  # (..., hidden): the non-linearity is what stops the collapse
        return self.drop(layers[-1](x))  # (..., n_out)


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: GPTConfig, layer: int = 0):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        # position-wise feed-forward: C -> 4C -> GELU -> C, or a mixture of experts (chapter 9)
        if cfg.is_moe_layer(layer):
            self.mlp = moe.MoE(cfg.moe_config())
        else:
            self.mlp = MLP(
                cfg.n_embd,
                cfg.n_embd,
                hidden=4 * cfg.n_embd,
                depth=2,
                activation="gelu",
                bias=cfg.bias,
                dropout=cfg.dropout,
            )

    def forward(self, x: torch.Tensor, kv: "LayerCache | None" = None) -> torch.Tensor:
        h = self.ln1(x)
        x = x + (self.attn(h) if kv is None else self.attn(h, kv))  # (B, T, C): the residual stream
        x = x + self.mlp(self.ln2(x))  # (B, T, C)
        return x


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


class LayerCache:
    """One block's share of a :class:`KVCache`: its keys and values, (B, H, capacity, C/H) each."""

    def __init__(self, owner: "KVCache", k: torch.Tensor, v: torch.Tensor):
        self.owner, self.k, self.v = owner, k, v

    def store(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new tokens' keys and values (B, H, T, C/H) after the cached ones; return all of them."""
        start, end = self.owner.length, self.owner.length + k.size(2)
        self.k[:, :, start:end] = k
        self.v[:, :, start:end] = v
        return self.k[:, :, :end], self.v[:, :, :end]  # (B, H, end, C/H) views: nothing copied


class KVCache:
    """The keys and values of every block for the tokens generated so far (chapters 6 and 7).

    A token's key and value in a block depend only on the tokens up to it, so
    when generation adds one token, the earlier ones need not run again: each
    block keeps them here.  Two tensors per block of (B, H, capacity, C/H), so
    ``2 * layers * capacity * C`` values per sequence
    (:func:`gputrain.memory.kv_cache_bytes`).  ``length`` tokens are filled;
    :meth:`GPT.forward` with ``cache=`` advances it.
    """

    def __init__(
        self,
        cfg: GPTConfig,
        batch_size: int = 1,
        *,
        capacity: int | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ):
        capacity = cfg.block_size if capacity is None else capacity
        if batch_size < 1 or not 1 <= capacity <= cfg.block_size:
            raise ValueError(
                f"a KV cache needs batch_size >= 1 and 1 <= capacity <= block_size={cfg.block_size}; "
                f"got {batch_size} and {capacity}"
            )
        shape = (batch_size, cfg.n_head, capacity, cfg.n_embd // cfg.n_head)  # (B, H, capacity, C/H)
        self.layers = [
            LayerCache(
                self, torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype)
            )
            for _ in range(cfg.n_layer)
        ]
        self.capacity = capacity
        self.length = 0  # tokens held

    def reset(self) -> None:
        """Forget every token (the tensors stay allocated)."""
        self.length = 0

    def tensors(self) -> list[torch.Tensor]:
        """Every key and value tensor, block by block."""
        return [t for layer in self.layers for t in (layer.k, layer.v)]

    @property
    def nbytes(self) -> int:
        """Bytes the cache holds (allocated for ``capacity`` tokens)."""
        return sum(t.numel() * t.element_size() for t in self.tensors())


def count_params(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters (shared tensors counted once: ``parameters()`` yields each tensor once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def gpt_num_params(cfg: GPTConfig, active: bool = False) -> int:
    """Closed-form parameter count of :class:`GPT` (the head counted once more when not tied).

    Per block: attention 4C^2 (qkv and proj) and MLP 8C^2 (C -> 4C -> C), so
    12C^2 weights, plus 13C biases and LayerNorm gains/shifts when ``bias``.
    An MoE block swaps the MLP (8C^2 + 5C) for :func:`gputrain.moe.moe_layer_params`;
    ``active=True`` counts only the experts one token uses (chapter 9).
    """
    V, T, L, C = cfg.vocab_size, cfg.block_size, cfg.n_layer, cfg.n_embd
    per_block = 12 * C * C + (13 * C if cfg.bias else 2 * C)  # weights + biases/LN (2 LN gains only)
    final_ln = 2 * C if cfg.bias else C
    n_moe = sum(cfg.is_moe_layer(i) for i in range(L))
    swap = 0
    if n_moe:
        moe_total, moe_active = moe.moe_layer_params(cfg.moe_config())
        swap = n_moe * ((moe_active if active else moe_total) - (8 * C * C + (5 * C if cfg.bias else 0)))
    head = 0 if getattr(cfg, "tie_embeddings", True) else V * C  # shapes without the field are tied
    return V * C + T * C + L * per_block + final_ln + swap + head


# --- the perceptron and what one layer cannot do (chapter 2) ----------------


class Perceptron(nn.Module):
    """Rosenblatt's perceptron: one linear layer and a step, ``y = [w.x + b > 0]`` (chapter 2)."""

    def __init__(self, n_in: int):
        super().__init__()
        self.linear = nn.Linear(n_in, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.linear(x).squeeze(-1) > 0).long()  # (B,) labels 0 or 1

    @torch.no_grad()
    def fit(self, x: torch.Tensor, y: torch.Tensor, epochs: int = 100, lr: float = 1.0) -> list[float]:
        """Rosenblatt's rule: after each mistake, ``w += lr (y - y_hat) x``; accuracy after each epoch.

        It stops early once every example is right (which happens whenever the
        classes are linearly separable, by the perceptron convergence theorem).
        """
        if x.dim() != 2 or y.shape != x.shape[:1]:
            raise ValueError(
                f"fit expects x of shape (n, features) and y of shape (n,), got {tuple(x.shape)} and {tuple(y.shape)}"
            )
        history = []
        for _ in range(epochs):
            for xi, yi in zip(x, y):  # one example at a time, as in 1958
                err = float(yi) - float(self(xi[None])[0])  # -1, 0 or +1
                self.linear.weight += lr * err * xi  # (1, n_in) += (n_in,)
                self.linear.bias += lr * err
            history.append((self(x) == y).float().mean().item())
            if history[-1] == 1.0:
                break
        return history


def best_linear_accuracy(x: torch.Tensor, y: torch.Tensor) -> float:
    """The best accuracy any line ``w.x + b = 0`` can reach on 2-D points, found exhaustively.

    Which side of a line each point falls on depends only on the order of the
    projections ``w.x``; that order changes only at the finitely many angles
    where ``w`` is perpendicular to the difference of two points.  One angle
    inside each interval between those critical angles, and every threshold
    between consecutive projections, therefore visits every labelling a line
    can produce.  (Chapter 2 uses it to show XOR's ceiling of 3/4.)
    """
    if x.dim() != 2 or x.shape[1] != 2:
        raise ValueError(f"best_linear_accuracy enumerates lines in the plane: x must be (n, 2), got {tuple(x.shape)}")
    x, y = x.double(), y.bool()
    d = x[None, :, :] - x[:, None, :]  # (n, n, 2): pairwise differences
    i, j = torch.triu_indices(len(x), len(x), 1)
    d = d[i, j]
    d = d[d.abs().sum(1) > 0]  # identical points never change order
    crit = torch.atan2(d[:, 1], d[:, 0]) + math.pi / 2  # normal directions where two points tie
    crit = torch.cat([crit, crit + math.pi]).remainder(2 * math.pi).sort().values
    if len(crit) == 0:
        angles = torch.zeros(1, dtype=torch.float64)
    else:
        gaps = torch.diff(torch.cat([crit, crit[:1] + 2 * math.pi]))
        angles = crit + gaps / 2  # one angle strictly inside each interval
    best = 0.0
    for a in angles:
        p = x @ torch.stack([torch.cos(a), torch.sin(a)])  # (n,) projections
        v = p.unique()  # sorted
        thresholds = torch.cat([v[:1] - 1, (v[1:] + v[:-1]) / 2, v[-1:] + 1])
        acc = ((p[None, :] > thresholds[:, None]) == y).double().mean(1).max().item()
        best = max(best, acc)
    return best


def collapse_linear(layers: "MLP | list[nn.Linear]") -> nn.Linear:
    """One ``nn.Linear`` equal to a stack of linear layers with nothing between them (chapter 2).

    ``W2 (W1 x + b1) + b2 = (W2 W1) x + (W2 b1 + b2)``: the product of the
    matrices is the whole network.
    """
    if isinstance(layers, MLP):
        if layers.activation != "identity":
            raise ValueError(
                f"this MLP puts {layers.activation!r} between its layers, so it is not one matrix; "
                "only an MLP built with activation='identity' collapses"
            )
        layers = layers.linears()
    if not layers:
        raise ValueError("collapse_linear needs at least one nn.Linear")
    w = layers[0].weight.detach()  # (out_1, in)
    b = _bias(layers[0])
    for layer in layers[1:]:
        w = layer.weight.detach() @ w  # (out_k, in)
        b = layer.weight.detach() @ b + _bias(layer)  # (out_k,)
    out = nn.Linear(w.shape[1], w.shape[0], dtype=w.dtype, device=w.device)
    with torch.no_grad():
        out.weight.copy_(w)
        out.bias.copy_(b)
    return out


def _bias(layer: nn.Linear) -> torch.Tensor:
    return layer.bias.detach() if layer.bias is not None else layer.weight.new_zeros(layer.out_features)


# --- looking inside a forward pass (chapter 2) ------------------------------


@dataclass
class ShapeRecord:
    """One module call seen during a forward pass."""

    name: str  # dotted path inside the model ("blocks.0.attn")
    kind: str  # the module's class name
    inputs: list[tuple[int, ...]]  # shapes of the tensor inputs
    output: tuple[int, ...]  # shape of the (first) tensor output


def trace_shapes(model: nn.Module, *inputs, max_depth: int | None = None) -> list[ShapeRecord]:
    """Run ``model(*inputs)`` and record every module's input and output shapes, in call order.

    Forward hooks see each call; ``max_depth`` keeps only names with at most
    that many dots plus one (1: direct children).  The hooks are removed again.
    """
    records: list[ShapeRecord] = []
    pending: dict[int, ShapeRecord] = {}
    handles = []

    def shapes(obj) -> list[tuple[int, ...]]:
        leaves = obj if isinstance(obj, (tuple, list)) else [obj]
        return [tuple(t.shape) for t in leaves if isinstance(t, torch.Tensor)]

    def pre(name):
        def hook(mod, args):
            kind = f"Activation({mod.name})" if isinstance(mod, Activation) else type(mod).__name__
            rec = ShapeRecord(name, kind, shapes(args), ())
            records.append(rec)
            pending[id(mod)] = rec

        return hook

    def post(mod, args, out):
        found = shapes(out)
        pending.pop(id(mod)).output = found[0] if found else ()

    for name, mod in model.named_modules():
        if not name or (max_depth is not None and name.count(".") + 1 > max_depth):
            continue
        handles += [mod.register_forward_pre_hook(pre(name)), mod.register_forward_hook(post)]
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for h in handles:
            h.remove()
    return records

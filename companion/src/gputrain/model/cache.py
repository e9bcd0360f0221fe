"""The KV cache: each block's keys and values for the tokens generated so far (chapters 6 and 7)."""

from __future__ import annotations

import torch

from .config import GPTConfig


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

"""Tensor-parallel attention, a whole tensor-parallel block, and sequence parallelism (chapter 8b).

Megatron-LM (Shoeybi et al. 2019) splits a transformer block over t ranks in
two column/row pairs: attention (the q, k, v projection column-parallel, so
each rank owns a/t whole heads; the output projection row-parallel) and the
MLP (``fc`` column-, ``fc2`` row-parallel).  Per block that is one all-reduce
after each row-parallel layer in the forward and one before each
column-parallel layer in the backward: 2 + 2.

Everything between those pairs (LayerNorms, dropouts, residual adds) is
*replicated*: every rank holds the whole (s, b, h) tensor.  Sequence
parallelism (Korthikanti et al. 2022) shards those regions along the
sequence instead.  An all-reduce is a reduce-scatter followed by an
all-gather, so the same traffic can be split: reduce-scatter after the
row-parallel layer (each rank keeps s/t positions), all-gather before the
column-parallel one.  The column-parallel layer keeps only its s/t shard of
the input for the backward and gathers it again there, so *every* activation
of the block is divided by t.

Tensors are laid out sequence-first, (S, B, H) as in Megatron, so shards are
contiguous slices of dimension 0.

One mechanism per module.  Imports go one way, down this list: a module may
import those above it, never one below::

    collectives  CommLog and the autograd functions that enter and leave TP regions
       |
    block        causal_attention, DenseBlock, ParallelBlock
    activations  korthikanti_per_layer, dropout_mask_bytes      (imports no sibling)
       |
    checks       block_check, saved_activation_bytes, torch_tp_check: run on every rank

Every name is re-exported here, so ``sequence.block_check`` works as it always did.
"""

from __future__ import annotations

from .activations import dropout_mask_bytes, korthikanti_per_layer
from .block import DenseBlock, ParallelBlock, causal_attention
from .checks import block_check, saved_activation_bytes, torch_tp_check
from .collectives import CommLog

__all__ = [
    # collectives
    "CommLog",
    # block
    "causal_attention",
    "DenseBlock",
    "ParallelBlock",
    # activations
    "korthikanti_per_layer",
    "dropout_mask_bytes",
    # checks
    "block_check",
    "saved_activation_bytes",
    "torch_tp_check",
]

"""FlashAttention, forward and backward, against attention that writes its scores to memory (chapter 11).

Attention is ``softmax(Q K^T · scale) V`` per (batch, head), with Q, K, V of
shape (T, D).  :func:`naive_attention` computes it the way eager code does:
the (T, T) scores go to memory, come back to be scaled and masked, go back,
come back for the softmax, go back as probabilities, and come back once more
for the product with V.  Every one of those passes moves T² numbers.

:func:`flash_attention` never lets a (T, T) matrix leave the chip.  One
program owns a block of ``block_m`` queries and walks over K and V in blocks
of ``block_n`` keys, keeping an *online softmax*: a running row max ``m``, a
running sum ``l`` of exponentials, and an output accumulator that is rescaled
by ``exp(m_old - m_new)`` whenever the max grows.  After the last block the
accumulator divided by ``l`` is the output, and ``m + log l`` (the
log-sum-exp of the row) is stored for the backward pass, T numbers per head.

The backward pass (FlashAttention-2's) recomputes the probabilities from Q,
K and the stored log-sum-exp instead of reading them: ``P = exp(Q K^T·scale -
lse)``.  With ``Delta = rowsum(dO ∘ O)`` (one small kernel), ``dS = P ∘ (dO
V^T - Delta)``; one kernel per block of keys accumulates ``dV += P^T dO`` and
``dK += dS^T Q · scale``, and a separate kernel per block of queries
accumulates ``dQ += dS K · scale`` (no atomics: the result is deterministic).

What is counted, exactly (:func:`flash_forward_bytes`, :func:`flash_backward_bytes`):
the forward reads Q once and K and V once *per block of queries* (causal:
only the key blocks up to the diagonal), and writes O and the fp32
log-sum-exp.  Its writes grow as T; its reads as T per block of queries, so
T²·D/block_m in all: the K/V re-reads, which a larger block (more on-chip
memory) divides.  The naive path's T² terms (:func:`naive_attention_bytes`)
are the scores and probabilities themselves, which no tile size removes.

One mechanism per module.  Imports go one way, down this list: a module may
import those above it, never one below::

    forward   flash_fwd_kernel: the forward pass, one Triton kernel
    backward  flash_delta_kernel, flash_dkdv_kernel, flash_dq_kernel   (imports no sibling)
       |
    flash     FlashAttention, flash_attention: checks and launches
       |
    naive     naive_attention and its scale-and-mask kernel
       |
    formulas  flash_forward_bytes, flash_backward_bytes, naive_attention_bytes

Every name is re-exported here, so ``from gputrain.kernels.attention import
flash_fwd_kernel`` works as it always did.
"""

from __future__ import annotations

from .backward import flash_delta_kernel, flash_dkdv_kernel, flash_dq_kernel
from .flash import FLOAT_DTYPES, HEAD_DIMS, FlashAttention, flash_attention
from .formulas import flash_backward_bytes, flash_forward_bytes, kv_rows_read, naive_attention_bytes, q_rows_read
from .forward import flash_fwd_kernel
from .naive import NAIVE_BLOCK, naive_attention, scale_mask_kernel

__all__ = [
    # forward
    "flash_fwd_kernel",
    # backward
    "flash_delta_kernel",
    "flash_dkdv_kernel",
    "flash_dq_kernel",
    # flash
    "FLOAT_DTYPES",
    "HEAD_DIMS",
    "FlashAttention",
    "flash_attention",
    # naive
    "NAIVE_BLOCK",
    "scale_mask_kernel",
    "naive_attention",
    # formulas
    "kv_rows_read",
    "q_rows_read",
    "flash_forward_bytes",
    "flash_backward_bytes",
    "naive_attention_bytes",
]

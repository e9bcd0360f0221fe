"""Counting compute (chapters 2 and 4, appendix "Making it fast"): FLOPs of a pass, per-token rules, MFU.

* **counted** FLOPs: :func:`count_flops` runs a function under
  ``torch.utils.flop_counter.FlopCounterMode`` and reports FLOPs per operator
  and per module;
* **rule-of-thumb** FLOPs: :func:`forward_flops_per_token` (2N plus the
  attention term) and :func:`train_flops_per_token` (three times that);
* **utilization**: :func:`gpt_train_flops_per_token` and :func:`mfu`, the
  model's arithmetic rate over a peak (measured peaks and throughput live in
  :mod:`gputrain.speed`).

A FLOP here is one floating-point add or multiply, so a multiply-add counts 2
and an (m x k) @ (k x n) product costs 2mkn.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import torch
import torch.nn as nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

aten = torch.ops.aten

# --- counted FLOPs -----------------------------------------------------------

# Operators that are matrix products (torch's counter knows these by itself,
# except the CPU attention kernel registered below).
MATMUL_OPS = frozenset(
    {
        "aten.mm",
        "aten.addmm",
        "aten.bmm",
        "aten.baddbmm",
        "aten._scaled_mm",
        "aten.convolution",
        "aten._scaled_dot_product_flash_attention",
        "aten._scaled_dot_product_efficient_attention",
        "aten._scaled_dot_product_cudnn_attention",
        "aten._scaled_dot_product_flash_attention_for_cpu",
        "aten._flash_attention_forward",
        "aten._efficient_attention_forward",
    }
)

# Rough arithmetic per output element of the operators that are not matrix
# products.  torch's counter ignores them (it counts only matmuls and
# convolutions); we add them so the matmul share is measured, not assumed.
# The exact numbers depend on the kernel (an exp is several FLOPs, GELU
# several more); chapter 2 doubles them all and the conclusion stands.
ELEMENTWISE_FLOPS: dict[str, float] = {
    "add": 1,
    "add_": 1,
    "sub": 1,
    "sub_": 1,
    "mul": 1,
    "mul_": 1,
    "div": 1,
    "div_": 1,
    "neg": 1,
    "relu": 1,
    "relu_": 1,
    "threshold_backward": 1,
    "where": 1,
    "masked_fill": 1,
    "exp": 4,
    "log": 4,
    "tanh": 6,
    "sigmoid": 5,
    "silu": 6,
    "gelu": 8,
    "native_layer_norm": 8,  # mean, variance, subtract, divide, scale, shift
    "_softmax": 5,
    "_safe_softmax": 5,
    "_log_softmax": 5,  # max, subtract, exp, sum, divide
    "native_dropout": 2,
}


def _per_element(cost: float) -> Callable:
    def formula(*args, out_val=None, **kwargs) -> int:
        outs = [t for t in tree_leaves(out_val) if isinstance(t, torch.Tensor)]
        return int(cost * outs[0].numel()) if outs else 0

    formula._get_raw = True  # FlopCounterMode passes the real output, not just shapes
    return formula


def _cpu_attention_flops(q_shape, k_shape, v_shape, *args, out_shape=None, **kwargs) -> int:
    # The fused CPU kernel does the same two products as the GPU kernels torch
    # already counts; like torch, count the full T x T scores even when causal.
    return sdpa_flop_count(q_shape, k_shape, v_shape)


def _cpu_attention_backward_flops(grad_shape, q_shape, k_shape, v_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_backward_flop_count(grad_shape, q_shape, k_shape, v_shape)  # twice the forward


@dataclass
class FlopCount:
    """FLOPs of one call, by operator and by module (chapter 2)."""

    by_op: dict[str, int]  # "aten.addmm" -> FLOPs
    by_module: dict[str, int] = field(default_factory=dict)  # "GPT.blocks.0.attn" -> FLOPs, descendants included

    @property
    def total(self) -> int:
        return sum(self.by_op.values())

    @property
    def matmul(self) -> int:
        """FLOPs spent in matrix products (linear layers, attention products, convolutions)."""
        return sum(n for op, n in self.by_op.items() if op in MATMUL_OPS)

    def matmul_share(self) -> float:
        return matmul_fraction(self.shares())

    def shares(self) -> dict[str, float]:
        """Fraction of all FLOPs per operator, largest first."""
        return {op: n / self.total for op, n in sorted(self.by_op.items(), key=lambda kv: -kv[1])}


def count_flops(fn: Callable, *args, elementwise: bool = True, elementwise_scale: float = 1.0, **kwargs) -> FlopCount:
    """FLOPs of ``fn(*args, **kwargs)`` (a model or any function), counted operator by operator.

    With ``elementwise=True`` the non-matmul operators are counted too (costs
    from :data:`ELEMENTWISE_FLOPS` times ``elementwise_scale``) and attention
    runs through PyTorch's reference ("math") path, so its softmax and masking
    show up as separate operators.  With ``elementwise=False`` only matrix
    products are counted, as ``FlopCounterMode`` does, on the default kernels.
    ``fn`` may run a backward pass too (training FLOPs); wrap it in
    ``torch.no_grad()`` yourself to skip building the graph.  Works on the
    ``meta`` device, so a model too large to run can be counted.
    """
    mapping: dict = {
        aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention_flops,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_attention_backward_flops,
    }
    context = contextlib.nullcontext()
    if elementwise:
        context = sdpa_kernel(SDPBackend.MATH)
        for name, cost in ELEMENTWISE_FLOPS.items():
            if hasattr(aten, name):
                mapping[getattr(aten, name)] = _per_element(cost * elementwise_scale)
    counter = FlopCounterMode(display=False, custom_mapping=mapping)
    with context, counter:
        fn(*args, **kwargs)
    counts = counter.get_flop_counts()
    by_op = {str(op): n for op, n in counts.get("Global", {}).items() if n}
    by_module = {name: sum(ops.values()) for name, ops in counts.items() if name != "Global"}
    return FlopCount(by_op=by_op, by_module=by_module)


def matmul_fraction(shares: dict[str, float]) -> float:
    """The part of a share table (FLOPs or time, by operator) that belongs to matrix products."""
    return sum(v for k, v in shares.items() if k in MATMUL_OPS)


# --- rule-of-thumb FLOPs -------------------------------------------------------


def matmul_params(model: nn.Module) -> int:
    """N in the 2N rule: weights of the model's ``nn.Linear`` layers, shared ones once.

    Every such weight takes part in exactly one multiply-add per token.
    Embedding lookups, biases and LayerNorm gains do not (they cost ~0 FLOPs);
    a tied output head is a Linear, so the tied embedding is counted once.
    """
    seen: set[int] = set()
    n = 0
    for m in model.modules():
        if isinstance(m, nn.Linear) and id(m.weight) not in seen:
            seen.add(id(m.weight))
            n += m.weight.numel()
    return n


def forward_flops_per_token(n_params: int, n_layer: int = 0, seq_len: int = 0, n_embd: int = 0) -> int:
    """Forward FLOPs per token of a transformer: ``2 N + 4 L T C`` (chapter 2).

    ``2N``: each weight is one multiply and one add per token.  ``4 L T C``:
    per layer a token's query meets T keys (``2 T C``) and its T attention
    weights mix T values (``2 T C``).  This counts the full T x T score matrix,
    as PaLM's utilization formula and torch's counter do; a causal kernel that
    skips the masked half does about ``2 L T C``.
    """
    return 2 * n_params + 4 * n_layer * seq_len * n_embd


def train_flops_per_token(n_params: int, n_layer: int = 0, seq_len: int = 0, n_embd: int = 0) -> int:
    """Training FLOPs per token, ``6 N + 12 L T C``: the backward pass costs twice the forward (chapter 4).

    Each weight's backward is two products (gradient of its input and of
    itself), hence 3 x the forward.  Flash-style attention kernels recompute
    the scores in backward, one product more: torch counts ``14 L T C`` there.
    """
    return 3 * forward_flops_per_token(n_params, n_layer, seq_len, n_embd)


def loglog_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of log y against log x: the exponent p in y ~ x^p."""
    lx = torch.tensor([math.log(v) for v in x], dtype=torch.float64)
    ly = torch.tensor([math.log(v) for v in y], dtype=torch.float64)
    lx, ly = lx - lx.mean(), ly - ly.mean()
    return float((lx * ly).sum() / (lx * lx).sum())


# --- utilization: tokens per second and MFU ------------------------------------------
# Model FLOPs utilization (MFU) is the rate at which a run does the model's own
# arithmetic, divided by the chip's peak.  It counts what the model needs, not
# what the kernels happen to do: recomputed activations and padded vocabulary
# rows are not "model FLOPs" (PaLM, Chowdhery et al. 2022, appendix B).


def gpt_train_flops_per_token(model: nn.Module, seq_len: Optional[int] = None) -> int:
    """Training FLOPs per token of a :class:`gputrain.model.GPT`: ``6 N + 12 L T C``.

    This is PaLM's appendix-B rule ``6N + 12 L H Q T`` (H heads of width Q, so
    ``H Q = C``), with N the weights of the model's linear layers
    (:func:`matmul_params`: the tied head once, embeddings lookups free) and
    ``T = seq_len`` (default: the model's context).  The attention term counts
    the full T x T score matrix, as PaLM does, even though a causal kernel
    skips half of it.  Appendix "Making it fast".
    """
    cfg = model.cfg
    return train_flops_per_token(matmul_params(model), cfg.n_layer, seq_len or cfg.block_size, cfg.n_embd)


def mfu(tokens_per_s: float, flops_per_token: float, peak: Optional[float]) -> Optional[float]:
    """Model FLOPs utilization: ``tokens_per_s * flops_per_token / peak`` (``None`` when no peak is known).

    ``peak`` is in FLOP/s: the datasheet's (:func:`gputrain.device.peak_flops`)
    or a measured one (:func:`measured_peak`); :func:`peak_for_mfu` picks.
    """
    if peak is None:
        return None
    if not peak > 0:
        raise ValueError(f"peak must be a positive FLOP/s figure, got {peak}")
    return tokens_per_s * flops_per_token / peak

"""Bytes on the busiest GPU of a layout: model states, and Korthikanti et al.'s activations per layer."""

from __future__ import annotations

from typing import Optional

from ...memory import MoEShape, estimate, expert_parallel_memory, get_recipe, shape_of
from ...model import GPTConfig
from ..pipeline import split_layers
from ..sequence import korthikanti_per_layer


def memory_per_gpu(
    model: GPTConfig,
    tp: int,
    pp: int,
    dp: int,
    micro_batch: int,
    microbatches: int,
    recompute: bool,
    zero_stage: int = 1,
    *,
    sequence_parallel: bool = True,
    cp: int = 1,
    flash_attention: bool = False,
) -> dict[str, float]:
    """Bytes on the busiest GPU: the first pipeline stage, which holds the embedding and the most activations.

    Model states come from :func:`gputrain.memory.estimate` (bf16 mixed-precision
    Adam, 16 bytes per parameter, ZeRO over the ``dp`` replicas) for the
    stage's share of the parameters, divided by ``tp``.  Activations are
    Korthikanti et al.'s per-layer bytes (:func:`gputrain.parallel.sequence.korthikanti_per_layer`):
    all divided by ``tp`` with ``sequence_parallel``, only 24 of the 34 sbh
    without it; full recomputation keeps each layer's input, 2sbh (/t with SP).
    Context parallelism gives each rank s/cp positions; ``flash_attention``
    drops the stored a·s² attention matrix (a fused kernel keeps O(s)).  ZeRO
    shards over the ``dp`` x ``cp`` ranks that hold the same weights.  1F1B
    keeps ``min(p, m)`` micro-batches of activations alive.
    """
    shape = shape_of(model)
    layers = len(split_layers(model.n_layer, pp)[0])
    stage_params = (layers * shape.layer_params + model.vocab_size * model.n_embd) / tp  # + the embedding
    states = estimate(stage_params, zero_stage=zero_stage, dp=dp * cp)  # a count: model states only
    in_flight = min(pp, microbatches)
    s = model.block_size // cp
    per_layer = _layer_activations(model, s, micro_batch, tp, recompute, sequence_parallel, flash_attention)
    acts = per_layer * layers * in_flight
    return {
        "weights": states.parameters,
        "gradients": states.gradients,
        "optimizer (master, m, v)": states.master_weights + states.optimizer_states,
        "activations": acts,
    }


def _layer_activations(model, s: int, b: int, tp: int, recompute: bool, sequence_parallel: bool,
                       flash_attention: bool) -> float:  # fmt: skip
    """16-bit activation bytes one layer keeps for one micro-batch of ``s`` positions (Korthikanti et al.)."""
    h, a = model.n_embd, model.n_head
    if recompute:
        return 2 * s * b * h / (tp if sequence_parallel else 1)  # only the layer's input is kept
    per_layer = korthikanti_per_layer(s, b, h, a, tp, sequence_parallel)
    if flash_attention:
        per_layer -= 5 * a * s * s * b / tp  # no stored attention matrix
    return per_layer


def moe_memory_per_gpu(
    model: MoEShape,
    tp: int,
    pp: int,
    dp: int,
    ep: int,
    micro_batch: int,
    microbatches: int,
    recompute: bool,
    zero_stage: int = 1,
    *,
    sequence_parallel: bool = True,
    cp: int = 1,
    flash_attention: bool = False,
    precision: str = "bf16-mixed",
    a2a_bytes: Optional[float] = None,
) -> tuple[int, dict[str, float]]:
    """(stage, bytes by component) of the busiest pipeline stage of an MoE model (chapter 9).

    Model states and all-to-all buffers come from
    :func:`gputrain.memory.expert_parallel_memory`; the other activations are
    those of :func:`memory_per_gpu` (Korthikanti et al.), scaled by the
    recipe's activation bytes over 2.  Stage ``i`` of 1F1B keeps
    ``min(p - i, m)`` micro-batches alive, so the first stage is not always
    the fullest: the last holds the head and DeepSeek-V3's MTP module.
    """
    s, b = model.block_size // cp, micro_batch
    per_layer = _layer_activations(model, s, b, tp, recompute, sequence_parallel, flash_attention)
    per_layer *= get_recipe(precision).activations / 2  # the formula counts 16-bit activations
    best = None
    for stage in range(pp):
        mem = expert_parallel_memory(
            model,
            ep=ep,
            dp=dp * cp,
            pp=pp,
            stage=stage,
            tp=tp,
            zero_stage=zero_stage,
            precision=precision,
            tokens=s * b,
            in_flight=min(pp - stage, microbatches),
            a2a_bytes=a2a_bytes,
            activation_bytes=per_layer / (s * b),
        )
        if best is None or sum(mem.values()) > sum(best[1].values()):
            best = (stage, mem)
    return best

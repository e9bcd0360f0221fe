"""Evaluate one layout, enumerate every valid one, and explain the best (chapters 8, 8b and 9)."""

from __future__ import annotations

from typing import Optional

from ..pipeline import split_layers
from ..tensor import shard_range
from .cluster import Cluster, Layout
from .expert_traffic import _as_moe, _check_ep
from .gpu_memory import memory_per_gpu, moe_memory_per_gpu
from .step_time import _step_seconds


def evaluate(
    model,
    cluster: Cluster,
    tp: int,
    pp: int,
    global_batch: int,
    micro_batch: int = 1,
    recompute: bool = False,
    zero_stage: int = 1,
    *,
    cp: int = 1,
    sequence_parallel: bool = True,
    flash_attention: bool = False,
    ep: int = 1,
    precision: str = "bf16-mixed",
    a2a_bytes: Optional[float] = None,
    nodes_per_token: Optional[int] = None,
) -> Layout:
    """Memory and estimated step time of one TP x CP x PP x DP layout (EP inside DP for an MoE model).

    ``model``: a ``GPTConfig`` (dense or with ``n_experts``) or a
    :class:`gputrain.memory.MoEShape`.  ``a2a_bytes``: bytes per value of the
    all-to-all (default: the recipe's activation bytes).  ``nodes_per_token``:
    node-limited routing (see :func:`_ep_time`); None routes freely.
    """
    moe = _as_moe(model)
    dp, m = _check_layout(model, cluster, tp, cp, pp, global_batch, micro_batch)
    _check_ep(ep, moe, cluster.gpus, dp, nodes_per_token)
    layout = Layout(tp=tp, pp=pp, dp=dp, micro_batch=micro_batch, microbatches=m, recompute=recompute, cp=cp,
                    sp=sequence_parallel, ep=ep)  # fmt: skip
    shared = dict(sequence_parallel=sequence_parallel, cp=cp, flash_attention=flash_attention)
    if moe is None:
        layout.memory = memory_per_gpu(model, tp, pp, dp, micro_batch, m, recompute, zero_stage, **shared)
    else:
        layout.stage, layout.memory = moe_memory_per_gpu(
            moe, tp, pp, dp, ep, micro_batch, m, recompute, zero_stage, precision=precision, a2a_bytes=a2a_bytes,
            **shared
        )  # fmt: skip
    layout.fits = layout.memory_total <= cluster.memory
    layout.seconds = _step_seconds(model, moe, cluster, layout, global_batch, precision, a2a_bytes, nodes_per_token)
    return layout


def _check_layout(model, cluster: Cluster, tp: int, cp: int, pp: int, global_batch: int, micro_batch: int):
    """``(dp, micro-batches per step)`` of a layout, or one clear error for what does not divide."""
    shard_range(model.n_embd, tp, 0, "hidden size")  # TP splits h (and the heads) evenly
    shard_range(model.n_head, tp, 0, "number of heads")
    split_layers(model.n_layer, pp)  # at least one layer per stage
    if cp < 1 or model.block_size % (2 * cp):
        raise ValueError(
            f"sequence length {model.block_size} is not divisible by 2 x CP degree = {2 * cp} "
            "(the zig-zag split); pick a CP degree that divides half the sequence"
        )
    if cluster.gpus % (tp * cp * pp):
        raise ValueError(f"TP{tp} x CP{cp} x PP{pp} = {tp * cp * pp} GPUs does not divide the cluster's {cluster.gpus}")
    dp = cluster.gpus // (tp * cp * pp)
    if global_batch % (dp * micro_batch):
        raise ValueError(f"global batch {global_batch} is not a multiple of DP{dp} x micro-batch {micro_batch}")
    return dp, global_batch // (dp * micro_batch)


def plan(
    model,
    cluster: Cluster,
    global_batch: int,
    micro_batch: int = 1,
    zero_stage: int = 1,
    *,
    context: bool = False,
    sequence_parallel: bool = True,
    flash_attention: bool = False,
    expert: bool = False,
    precision: str = "bf16-mixed",
    nodes_per_token: Optional[int] = None,
) -> list[Layout]:
    """Every valid layout (with and without recomputation, CP degrees too if ``context``, EP degrees
    too if ``expert``); fitting, then fastest, first."""
    layouts, reason = [], None
    divisors = lambda n: (d for d in range(1, n + 1) if n % d == 0)  # noqa: E731
    for tp in divisors(cluster.gpus):
        for cp in divisors(cluster.gpus // tp) if context else (1,):
            for pp in divisors(cluster.gpus // (tp * cp)):
                for ep in divisors(cluster.gpus // (tp * cp * pp)) if expert else (1,):
                    for recompute in (False, True):
                        try:  # evaluate() is the one place that decides what a valid layout is
                            layouts.append(
                                evaluate(
                                    model,
                                    cluster,
                                    tp,
                                    pp,
                                    global_batch,
                                    micro_batch,
                                    recompute,
                                    zero_stage,
                                    cp=cp,
                                    sequence_parallel=sequence_parallel,
                                    flash_attention=flash_attention,
                                    ep=ep,
                                    precision=precision,
                                    nodes_per_token=nodes_per_token,
                                )
                            )
                        except ValueError as exc:
                            reason = exc
    if not layouts:
        raise ValueError(
            f"no layout divides the cluster, the model and the batch (last reason: {reason}); try another global batch"
        )
    return sorted(layouts, key=lambda lay: (not lay.fits, lay.step_seconds))


def explain(layout: Layout, cluster: Cluster) -> str:
    """One paragraph on where a layout's time goes and which links carry what."""
    parts = ", ".join(f"{k} {v:.2f} s" for k, v in layout.seconds.items() if v > 0)
    fit = "fits" if layout.fits else "does NOT fit"
    return (
        f"{layout.label()}: {layout.memory_total / 1e9:.1f} GB per GPU ({fit} in "
        f"{cluster.memory / 1e9:.0f} GB); step {layout.step_seconds:.2f} s = {parts}; "
        f"TP over {layout.links['TP']}"
        + (f", CP over {layout.links['CP']}" if layout.cp > 1 else "")
        + f", PP over {layout.links['PP']}, DP over {layout.links['DP']}"
        + (f", EP over {layout.links['EP']}." if layout.ep > 1 else ".")
    )


def best(layouts: list[Layout]) -> Optional[Layout]:
    """The fastest layout that fits, or None."""
    return next((lay for lay in layouts if lay.fits), None)

"""Seconds per training step of one layout: compute, the pipeline bubble, and each kind of communication."""

from __future__ import annotations

from typing import Optional

from ...flops import forward_flops_per_token, train_flops_per_token
from ...memory import MoEShape, get_recipe
from ...model import gpt_num_params
from ..context import ring_bytes
from ..ring import ring_all_reduce_time
from .cluster import ACT_BYTES, Cluster, Layout
from .expert_traffic import _ep_time


def _step_seconds(
    model,
    moe: Optional[MoEShape],
    cluster: Cluster,
    layout: Layout,
    global_batch: int,
    precision: str,
    a2a_bytes: Optional[float],
    nodes_per_token: Optional[int],
) -> dict[str, float]:
    """Estimated seconds per step by part; no overlap of communication with compute."""
    tp, cp, pp, dp, ep, m = layout.tp, layout.cp, layout.pp, layout.dp, layout.ep, layout.microbatches
    micro_batch, recompute = layout.micro_batch, layout.recompute

    def link(span: int) -> tuple[float, str]:  # a group of `span` consecutive GPUs
        return (cluster.nvlink, "NVLink") if span <= cluster.gpus_per_node else (cluster.network, "network")

    n_params = gpt_num_params(model) if moe is None else moe.active  # compute: active parameters only
    width = model.n_embd if moe is None else (moe.attn_width or moe.n_embd)
    shape = (n_params, model.n_layer, model.block_size, width)
    per_token = train_flops_per_token(*shape) + (forward_flops_per_token(*shape) if recompute else 0)
    compute = per_token * global_batch * model.block_size / (cluster.gpus * cluster.peak_flops * cluster.efficiency)
    layers = model.n_layer / pp
    act = micro_batch * model.block_size // cp * model.n_embd * ACT_BYTES  # one b x s/c x h message
    tp_bw, layout.links["TP"] = link(tp)
    cp_bw, cp_link = link(tp * cp)  # CP neighbours are tp GPUs apart
    if cp > 1:
        layout.links["CP"] = cp_link
    pp_bw, layout.links["PP"] = link(tp * cp * ep * pp)  # the next stage is tp x cp x ep GPUs further on
    dp_bw, layout.links["DP"] = link(tp * cp * pp * dp)
    kv = ring_bytes(micro_batch, model.n_head // tp, model.block_size, model.n_embd // model.n_head, cp, ACT_BYTES)
    allreduces = (6 if recompute else 4) * layers * m  # per layer: 2 forward (+2 recomputed), 2 backward
    if moe is None:
        dp_time = ring_all_reduce_time(ACT_BYTES * n_params / (tp * pp), dp * cp, dp_bw) if dp * cp > 1 else 0.0
        ep_time = 0.0
    else:  # replicated gradients over every DP x CP rank, expert gradients over the dp / ep that share experts
        replicated, routed = moe.params - moe.routed, moe.routed / ep
        dp_time = sum(
            ring_all_reduce_time(ACT_BYTES * n / (tp * pp), ranks * cp, dp_bw)
            for n, ranks in ((replicated, dp), (routed, dp // ep))
            if ranks * cp > 1
        )
        tokens = micro_batch * model.block_size / cp / (tp if layout.sp else 1)  # tokens this rank routes
        nbytes = get_recipe(precision).activations if a2a_bytes is None else a2a_bytes
        ep_time = _ep_time(moe, cluster, layout, tokens, nbytes, link, nodes_per_token)
    return {
        "compute": compute,
        "bubble": compute * (pp - 1) / m,
        "TP comm": allreduces * ring_all_reduce_time(act, tp, tp_bw) if tp > 1 else 0.0,
        "CP comm": (
            layers * m * (kv["forward"] * (2 if recompute else 1) + kv["backward"]) / cp_bw if cp > 1 else 0.0
        ),  # K, V (and dK, dV) round the ring; recomputation repeats the forward
        "PP comm": 2 * m * act / tp / pp_bw if pp > 1 else 0.0,  # each TP rank sends its 1/t share
        "DP comm": dp_time,  # CP ranks hold the same weights: they reduce too
        "EP comm": ep_time,
    }

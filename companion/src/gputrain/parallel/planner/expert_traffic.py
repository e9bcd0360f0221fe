"""Expert parallelism in the planner (chapter 9): its checks, and the all-to-all bytes and seconds per step."""

from __future__ import annotations

from typing import Optional

from ...memory import MoEShape, moe_shape
from ..expert import check_expert_split
from .cluster import ACT_BYTES, Cluster, Layout


def all_to_all_bytes(tokens: int, top_k: int, dim: int, ep: int, nbytes: float = ACT_BYTES) -> float:
    """Bytes one rank sends to other ranks in one MoE layer's forward: dispatch + combine (chapter 9).

    Each of the ``tokens`` sends ``top_k`` rows of ``dim`` values to the
    experts' ranks and gets them back; with uniform routing a share
    (EP - 1) / EP of the rows belongs to other ranks: 2·N·k·C·bytes·(EP-1)/EP.
    Backward sends the same again (the gradients of both exchanges).
    """
    return 2 * tokens * top_k * dim * nbytes * (ep - 1) / ep


def _as_moe(model) -> Optional[MoEShape]:
    if isinstance(model, MoEShape):
        return model
    return moe_shape(model) if getattr(model, "n_experts", 0) else None


def _check_ep(ep: int, moe: Optional[MoEShape], gpus: int, dp: int, nodes_per_token: Optional[int]) -> None:
    """One clear error per way an expert-parallel degree can be wrong."""
    if ep == 1:
        return
    if ep < 1 or gpus % ep:
        raise ValueError(
            f"EP group size {ep} does not divide the world of {gpus} GPUs; pick an EP degree that divides {gpus}"
        )
    if nodes_per_token is not None and nodes_per_token < 1:
        raise ValueError(f"nodes_per_token must be >= 1 (or None for free routing), got {nodes_per_token}")
    if moe is None:
        raise ValueError(f"EP{ep} needs a model with routed experts (a GPTConfig with n_experts or a MoEShape)")
    check_expert_split(moe.n_experts, ep)  # "... experts do not split evenly over ... ranks"
    if dp % ep:
        raise ValueError(
            f"EP{ep} does not divide DP{dp}: expert-parallel ranks are carved out of the "
            "data-parallel ranks; lower TP x CP x PP or pick an EP degree that divides DP"
        )


def _ep_time(
    moe: MoEShape,
    cluster: Cluster,
    lay: Layout,
    tokens: float,
    nbytes: float,
    link,
    nodes_per_token: Optional[int] = None,
) -> float:
    """Seconds of all-to-all per step: the in-node share over NVLink while the rest crosses the network.

    With ``nodes_per_token`` = M (DeepSeek-V3's node-limited routing, M = 4)
    a token crosses the network once per destination node; counting M
    destination nodes per token (the cap; all n when the group has fewer),
    M·(n-1)/n of them are not its own on average over the n nodes of the group.  Inside a node the rows fan out
    over NVLink, which then carries every row bound for another GPU.
    """
    if lay.ep == 1:
        return 0.0
    group = lay.tp * lay.cp  # EP peers are tp x cp GPUs apart
    local = min(lay.ep, max(1, cluster.gpus_per_node // group))  # EP ranks in this GPU's node (itself included)
    lay.links["EP"] = link(group * lay.ep)[1] if local in (1, lay.ep) else "NVLink + network"
    per_layer = all_to_all_bytes(tokens, moe.top_k, moe.n_embd, lay.ep, nbytes)  # one forward
    inside = per_layer * (local - 1) / (lay.ep - 1) / cluster.nvlink
    across = per_layer * (lay.ep - local) / (lay.ep - 1) / cluster.network
    nodes = lay.ep // local
    if nodes_per_token is not None and nodes > 1:
        reach = min(nodes_per_token, nodes)  # destination nodes per token
        inside = per_layer / cluster.nvlink  # the fan-out: every row for another GPU crosses NVLink once
        across = 2 * tokens * reach * (nodes - 1) / nodes * moe.n_embd * nbytes / cluster.network
    moe_layers = (sum(moe.moe_layers) + moe.extra_last_moe) / lay.pp
    return max(inside, across) * moe_layers * lay.microbatches * (3 if lay.recompute else 2)

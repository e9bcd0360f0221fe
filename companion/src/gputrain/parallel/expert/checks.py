"""Checks run on every rank by launch() (chapter 9): expert parallelism against one process, node limits, bias sync."""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.distributed as dist

from ...moe import MoE, MoEConfig, apply_capacity, update_router_biases
from .exchange import A2ATraffic, node_traffic_bytes
from .layer import ExpertParallelMoE


def _dense_layer(dim, n_experts, top_k, dtype, seed, **kw) -> MoE:
    torch.manual_seed(seed)
    dense = MoE(MoEConfig(dim=dim, n_experts=n_experts, top_k=top_k, expert_hidden=2 * dim, n_shared=1, **kw))
    dense.to(dtype)
    with torch.no_grad():
        dense.router.weight.normal_(0, 1.0)  # spread affinities: no ties among the top k
    return dense


def _max_err(a, b) -> float:
    if a is None or b is None:
        return 0.0 if a is None and b is None else float("inf")  # one got a gradient, the other not
    return (a - b).abs().max().item() if a.numel() else 0.0  # an empty batch: nothing to differ


def expert_parallel_check(
    dtype: str = "float64",
    tokens: int = 24,
    dim: int = 16,
    n_experts: int = 8,
    top_k: int = 2,
    seed: int = 0,
    router: str = "sigmoid",
    capacity_factor: Optional[float] = None,
    starve_expert: "int | Sequence[int] | None" = None,
) -> dict:
    """Expert-parallel layer vs the one-process layer on the same tokens: outputs, gradients, bytes.

    Every rank builds the same one-process layer (same seed) and the same P
    batches; the reference runs all P batches through it with the losses
    summed.  The expert-parallel layer runs this rank's batch only; its
    replicated router and shared experts get their gradients summed over ranks
    (as data parallelism would), its local experts need nothing.
    ``starve_expert``: one expert or several that no token may choose (a rank
    whose experts are all starved receives nothing); ``tokens=0``: empty batches.
    """
    P, rank, dt = dist.get_world_size(), dist.get_rank(), getattr(torch, dtype)
    dense = _dense_layer(dim, n_experts, top_k, dt, seed, router=router, capacity_factor=capacity_factor, balance="aux")
    if starve_expert is not None:
        dense.router.e_bias[torch.as_tensor(starve_expert)] = -100.0  # nobody routes there
    g = torch.Generator().manual_seed(seed + 1)
    X = torch.randn(P, tokens, dim, generator=g, dtype=dt)  # (P, N, C): every rank's batch
    Wt = torch.randn(P, tokens, dim, generator=g, dtype=dt)  # a random linear loss per rank
    Xr = X.clone().requires_grad_()
    outs = [dense(Xr[s]) for s in range(P)]
    ref_loss = sum((o * Wt[s]).sum() for s, o in enumerate(outs))
    ref_loss.backward()  # aux losses left out of both sides: they are local to each rank anyway

    traffic = A2ATraffic()
    ep = ExpertParallelMoE.from_dense(dense, traffic=traffic)
    x = X[rank].clone().requires_grad_()
    out = ep(x)
    (out * Wt[rank]).sum().backward()
    errors = _errors(ep, dense, out, outs[rank], x.grad, Xr.grad[rank], rank)
    return {
        "errors": errors,
        "sent": dict(traffic.sent),
        "expected": _expected_bytes(dense, X, rank, ep.local),
        "load": ep.last_counts.tolist(),
        "dropped": ep.last_dropped,
        "local_grads_none": [all(p.grad is None for p in e.parameters()) for e in ep.experts],
    }


def _errors(ep: ExpertParallelMoE, dense: MoE, out, ref_out, x_grad, ref_x_grad, rank: int) -> dict:
    """Largest differences between the expert-parallel layer and the one-process one, after the backward.

    The replicated router and shared experts get their gradients summed over
    ranks first (as data parallelism would); the local experts need nothing.
    """
    replicated = list(ep.router.parameters()) + list(ep.shared.parameters())
    for p in replicated:
        dist.all_reduce(p.grad)  # each rank's share of dL/dw: sum them
    dense_replicated = list(dense.router.parameters()) + list(dense.shared.parameters())
    first = rank * ep.local
    local_pairs = [
        (a.grad, b.grad)
        for e, d in zip(ep.experts, list(dense.experts)[first : first + ep.local])
        for a, b in zip(e.parameters(), d.parameters())
    ]
    return {
        "output": _max_err(out, ref_out),
        "input_grad": _max_err(x_grad, ref_x_grad),
        "replicated_grads": max(_max_err(a.grad, b.grad) for a, b in zip(replicated, dense_replicated)),
        "expert_grads": max(_max_err(a, b) for a, b in local_pairs),
    }


def _expected_bytes(dense: MoE, X: torch.Tensor, rank: int, local: int) -> dict:
    """Bytes each phase should send, from the routing alone: tokens x k x C x itemsize, less the local share."""
    P, N, C = X.shape
    row = C * X.element_size()
    kept_to = torch.zeros(P, P, dtype=torch.long)  # kept assignments from source s to rank d
    for s in range(P):
        r = dense.router(X[s])
        keep = apply_capacity(r.experts, dense.cfg.n_experts, dense.cfg.capacity(N))
        kept_to[s] = torch.bincount(r.experts[keep] // local, minlength=P)
    dispatch = (int(kept_to[rank].sum()) - int(kept_to[rank, rank])) * row  # = (N k - dropped - local) C b
    combine = (int(kept_to[:, rank].sum()) - int(kept_to[rank, rank])) * row  # what others sent me, back
    return {
        "dispatch": dispatch,
        "combine": combine,
        "dispatch_grad": combine,
        "combine_grad": dispatch,
        "uniform_estimate": N * dense.cfg.top_k * row * (P - 1) / P,
    }


def node_limited_check(
    nodes: int = 2,
    topk_groups: int = 1,
    tokens: int = 256,
    dim: int = 16,
    n_experts: int = 16,
    top_k: int = 4,
    seed: int = 0,
) -> dict:
    """Bytes leaving this rank's "node" with and without DeepSeek-V3's node limit, same router weights.

    The P ranks form ``nodes`` nodes of P/nodes consecutive ranks; expert
    groups coincide with nodes.  Two numbers per routing: the all-to-all bytes
    this rank really sent to ranks of other nodes (one row per token-expert
    assignment), and the bytes under V3's send-once-per-node dispatch.
    """
    P, rank = dist.get_world_size(), dist.get_rank()
    if P % nodes:
        raise ValueError(f"{nodes} nodes do not split {P} ranks evenly; pick a divisor of {P}")
    per_node = P // nodes
    g = torch.Generator().manual_seed(seed + 1 + rank)
    x = torch.randn(tokens, dim, generator=g)  # (N, C)
    result = {}
    for name, kw in (("free", {}), ("limited", {"n_groups": nodes, "topk_groups": topk_groups})):
        dense = _dense_layer(dim, n_experts, top_k, torch.float32, seed, **kw)
        ep = ExpertParallelMoE.from_dense(dense)
        with torch.no_grad():
            ep(x)
        row = dim * x.element_size()
        mine = rank // per_node
        off_node = sum(n for d, n in enumerate(ep.last_send_splits) if d // per_node != mine) * row
        r = dense.router(x)
        result[name] = {
            "a2a_off_node": off_node,
            "once_per_node": node_traffic_bytes(r.experts, mine, n_experts // nodes, row),
            "nodes_per_token": float(
                (r.experts // (n_experts // nodes)).sort(1).values.diff(1).ne(0).sum(1).add(1).float().mean()
            ),
        }
    return result


def bias_sync_check(tokens: int = 64, seed: int = 0) -> list[float]:
    """One aux-loss-free bias update on a rank-local batch; returns the bias (must match on every rank)."""
    torch.manual_seed(seed)
    layer = MoE(MoEConfig(dim=16, n_experts=8, top_k=2, balance="bias", bias_gamma=0.1))
    x = torch.randn(tokens, 16, generator=torch.Generator().manual_seed(seed + 1 + dist.get_rank()))
    with torch.no_grad():
        layer(x)  # (N, C): loads from this rank's tokens only
    update_router_biases(layer)
    return layer.router.e_bias.tolist()

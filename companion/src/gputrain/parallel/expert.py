"""Expert parallelism: experts split across ranks, tokens sent to them by all-to-all (chapter 9).

Each of the P ranks of an expert-parallel group owns ``E / P`` of a
:class:`gputrain.moe.MoE` layer's routed experts (rank r: experts
``[r E/P, (r+1) E/P)``) and a full copy of the router and the shared experts.
A forward pass on a rank's own tokens:

1. routes them locally (capacity, if any, is applied per rank, as GShard's
   per-group capacity);
2. exchanges the per-expert counts (a small equal-split all-to-all), so every
   rank knows how many rows it will receive from each peer;
3. *dispatch*: one ``all_to_all_single`` with uneven splits sends each
   token-expert assignment to the rank that owns the expert;
4. runs the local experts on what arrived;
5. *combine*: a second all-to-all returns the outputs to the tokens' ranks,
   which weight them by the gates and add them up.

Backward runs the same two exchanges in reverse (:class:`_AllToAll`).  Gloo
implements ``all_to_all_single`` with uneven splits on the CPU (checked with
torch 2.13), so no send/recv emulation is needed.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch
import torch.distributed as dist
import torch.nn as nn

from ..moe import Expert, MoE, MoEConfig, apply_capacity, run_experts, update_router_biases


@dataclass
class A2ATraffic:
    """Bytes this rank sent to *other* ranks, per phase ("dispatch", "combine", and their "_grad")."""

    sent: dict[str, int] = field(default_factory=dict)
    calls: int = 0

    def add(self, phase: str, nbytes: int) -> None:
        self.sent[phase] = self.sent.get(phase, 0) + nbytes
        self.calls += 1


class _AllToAll(torch.autograd.Function):
    """``all_to_all_single`` with uneven splits; backward sends the gradients back the way they came."""

    @staticmethod
    def forward(ctx, x, out_splits, in_splits, group, traffic, phase):
        ctx.splits, ctx.group, ctx.traffic, ctx.phase = (out_splits, in_splits), group, traffic, phase
        return _exchange(x, out_splits, in_splits, group, traffic, phase)

    @staticmethod
    def backward(ctx, grad):
        out_splits, in_splits = ctx.splits
        g = _exchange(grad, in_splits, out_splits, ctx.group, ctx.traffic, ctx.phase + "_grad")
        return g, None, None, None, None, None


def _exchange(x, out_splits, in_splits, group, traffic, phase):
    x = x.contiguous()  # (sum(in_splits), C)
    out = x.new_empty((sum(out_splits),) + tuple(x.shape[1:]))  # (sum(out_splits), C)
    dist.all_to_all_single(out, x, out_splits, in_splits, group=group)
    if traffic is not None:
        me = dist.get_rank(group)
        row = math.prod(x.shape[1:]) * x.element_size()  # from the shape: x may have no rows at all
        traffic.add(phase, (sum(in_splits) - in_splits[me]) * row)  # what left this rank
    return out


def all_to_all(
    x: torch.Tensor,
    out_splits: list[int],
    in_splits: list[int],
    group=None,
    traffic: Optional[A2ATraffic] = None,
    phase: str = "dispatch",
) -> torch.Tensor:
    """Differentiable all-to-all: rows ``in_splits[j]`` of ``x`` go to rank j; ``out_splits[j]`` arrive from j."""
    return _AllToAll.apply(x, list(out_splits), list(in_splits), group, traffic, phase)


def check_expert_split(n_experts: int, ranks: int) -> int:
    """Experts per rank; a clear error when the experts do not split evenly."""
    if ranks < 1 or n_experts % ranks:
        raise ValueError(
            f"{n_experts} experts do not split evenly over {ranks} expert-parallel ranks; "
            f"use a number of ranks that divides {n_experts}"
        )
    return n_experts // ranks


def expert_parallel_group(ep_size: int):
    """This rank's expert-parallel group: consecutive ranks in groups of ``ep_size`` (call on every rank)."""
    world = dist.get_world_size()
    if ep_size < 1 or world % ep_size:
        raise ValueError(
            f"expert-parallel size {ep_size} does not divide the world size {world}; pick a divisor of {world}"
        )
    mine = None
    for start in range(0, world, ep_size):
        g = dist.new_group(list(range(start, start + ep_size)))  # every rank creates every group
        if start <= dist.get_rank() < start + ep_size:
            mine = g
    return mine


class ExpertParallelMoE(MoE):
    """A :class:`gputrain.moe.MoE` whose routed experts are split over an expert-parallel group (chapter 9)."""

    def __init__(self, cfg: MoEConfig, group=None, traffic: Optional[A2ATraffic] = None):
        super().__init__(cfg)
        self.group = group
        self.ranks, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.local = check_expert_split(cfg.n_experts, self.ranks)
        first = self.rank * self.local
        self.experts = nn.ModuleList(list(self.experts)[first : first + self.local])  # only my experts
        self.traffic = traffic if traffic is not None else A2ATraffic()
        self.last_send_splits: list[int] = []

    @classmethod
    def from_dense(cls, dense: MoE, group=None, traffic: Optional[A2ATraffic] = None) -> "ExpertParallelMoE":
        """This rank's share of a one-process layer: same router and shared experts, E/P routed experts."""
        ep = cls(dense.cfg, group, traffic)
        ep.to(dense.router.weight.dtype)
        ep.router.load_state_dict(dense.router.state_dict())
        ep.shared.load_state_dict(dense.shared.state_dict())
        first = ep.rank * ep.local
        for mine, theirs in zip(ep.experts, list(dense.experts)[first : first + ep.local]):
            mine.load_state_dict(theirs.state_dict())
        return ep

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])  # (N, C)
        r = self.route(x)
        kept = r.keep.reshape(-1)
        flat_e = r.experts.reshape(-1)[kept]  # (A,)
        token = torch.arange(len(x), device=x.device).repeat_interleave(self.cfg.top_k)[kept]  # (A,)
        order = torch.argsort(flat_e, stable=True)  # by expert, hence by owning rank
        counts = torch.bincount(flat_e, minlength=self.cfg.n_experts)  # (E,)
        recv = self._exchange_counts(counts)  # (P, E/P): rows from each source for each local expert
        send_splits = counts.view(self.ranks, self.local).sum(1).tolist()
        recv_splits = recv.sum(1).tolist()
        self.last_send_splits = send_splits
        x_in = all_to_all(x[token[order]], recv_splits, send_splits, self.group, self.traffic, "dispatch")
        # arrived grouped by source rank, then expert: regroup by local expert for the matmuls
        local_e = torch.arange(self.local, device=x.device).repeat(self.ranks).repeat_interleave(recv.reshape(-1))
        perm = torch.argsort(local_e, stable=True)
        y = run_experts(self.experts, x_in[perm], recv.sum(0).tolist())  # (R, C)
        y = y[torch.argsort(perm)]  # back to arrival order
        y = all_to_all(y, send_splits, recv_splits, self.group, self.traffic, "combine")  # (A, C)
        y = y * r.gates.reshape(-1)[kept][order, None].to(y.dtype)
        return self.shared_out(x).index_add(0, token[order], y).view(shape)

    def _exchange_counts(self, counts: torch.Tensor) -> torch.Tensor:
        recv = torch.empty_like(counts)
        dist.all_to_all_single(recv, counts, group=self.group)  # equal splits: E/P counts per peer
        return recv.view(self.ranks, self.local)


def node_traffic_bytes(experts: torch.Tensor, source_node: int, experts_per_node: int, row_bytes: int) -> int:
    """Bytes that leave ``source_node`` when each token is sent once to every other node it uses.

    DeepSeek-V3 dispatches a token over InfiniBand once per destination node and
    fans it out to that node's GPUs over NVLink, so what crosses the network is
    the number of distinct (token, other node) pairs times a token's bytes.
    """
    nodes = experts // experts_per_node  # (N, k)
    pairs = torch.zeros(len(experts), int(nodes.max()) + 1, dtype=torch.bool).scatter_(1, nodes, True)
    if source_node < pairs.shape[1]:
        pairs[:, source_node] = False
    return int(pairs.sum()) * row_bytes


# --- checks and measurements run on every rank by launch() (chapter 9) ------


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
    errors = {
        "output": _max_err(out, outs[rank]),
        "input_grad": _max_err(x.grad, Xr.grad[rank]),
        "replicated_grads": max(_max_err(a.grad, b.grad) for a, b in zip(replicated, dense_replicated)),
        "expert_grads": max(_max_err(a, b) for a, b in local_pairs),
    }
    return {
        "errors": errors,
        "sent": dict(traffic.sent),
        "expected": _expected_bytes(dense, X, rank, ep.local),
        "load": ep.last_counts.tolist(),
        "dropped": ep.last_dropped,
        "local_grads_none": [all(p.grad is None for p in e.parameters()) for e in ep.experts],
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


def overlap_timing(
    tokens: int = 4096,
    dim: int = 256,
    hidden: int = 256,
    n_micro: int = 4,
    local_experts: int = 2,
    repeats: int = 5,
    seed: int = 0,
) -> dict:
    """Seconds per step of one MoE layer's dispatch -> experts -> combine, with and without overlap.

    Routing is uniform and fixed (the split sizes are exchanged beforehand), so
    only the data exchange and the expert matmuls are timed.  "sequential"
    waits for each all-to-all; "overlapped" starts the dispatch of micro-batch
    i+1 (``async_op=True``) before computing micro-batch i, and leaves each
    combine in flight while the next micro-batch computes, the way DualPipe
    hides communication behind computation.  Medians over ``repeats`` rounds, the four
    measurements taken in turn within each round.
    """
    P = dist.get_world_size()
    torch.manual_seed(seed + dist.get_rank())
    experts = [Expert(dim, hidden) for _ in range(local_experts)]
    per = tokens // P  # rows for each rank per micro-batch
    xs = [torch.randn(per * P, dim) for _ in range(n_micro)]  # (N, C) each, already sorted by rank
    splits, counts = [per] * P, [per * P // local_experts] * local_experts

    def a2a(x, async_op=False):
        out = torch.empty_like(x)
        return out, dist.all_to_all_single(out, x, splits, splits, async_op=async_op)

    def compute(x):
        return run_experts(experts, x, counts)

    def sequential():
        for x in xs:
            a2a(compute(a2a(x)[0]))

    def overlapped():
        nxt, pending = a2a(xs[0], True), []
        for i in range(n_micro):
            cur, handle = nxt
            handle.wait()
            if i + 1 < n_micro:
                nxt = a2a(xs[i + 1], True)  # next dispatch travels while this one computes
            pending.append(a2a(compute(cur), True)[1])  # combine travels while the next computes
        for h in pending:
            h.wait()

    fns = {
        "dispatch_s": lambda: a2a(xs[0]),
        "compute_s": lambda: compute(xs[0]),
        "sequential_s": sequential,
        "overlapped_s": overlapped,
    }
    with torch.no_grad():
        out = _round_robin_medians(fns, repeats)
    return {**out, "bytes_per_dispatch": per * (P - 1) * dim * 4, "n_micro": n_micro}


def _round_robin_medians(fns: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each function, timed in turn within each round (the first round warms up)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for rep in range(repeats + 1):  # round-robin, so a change in the machine's load hits all alike
        for name, fn in fns.items():
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            if rep:
                times[name].append(time.perf_counter() - t0)
    return {k: sorted(v)[len(v) // 2] for k, v in times.items()}


def bias_sync_check(tokens: int = 64, seed: int = 0) -> list[float]:
    """One aux-loss-free bias update on a rank-local batch; returns the bias (must match on every rank)."""
    torch.manual_seed(seed)
    layer = MoE(MoEConfig(dim=16, n_experts=8, top_k=2, balance="bias", bias_gamma=0.1))
    x = torch.randn(tokens, 16, generator=torch.Generator().manual_seed(seed + 1 + dist.get_rank()))
    with torch.no_grad():
        layer(x)  # (N, C): loads from this rank's tokens only
    update_router_biases(layer)
    return layer.router.e_bias.tolist()


# Published figures used by :func:`v3_compute_comm_ratio` (DeepSeek-V3 report, arXiv 2412.19437, §3.2;
# NVIDIA's H100/H800 SXM datasheet for the dense BF16 peak).
V3_FIGURES = dict(
    hidden=7168, expert_ffn=2048, experts_per_node=3.2, bf16_flops=989e12, ib_bytes_per_s=50e9, nvlink_bytes_per_s=160e9
)


def v3_compute_comm_ratio(
    hidden: int = 7168,
    expert_ffn: int = 2048,
    experts_per_node: float = 3.2,
    flops: float = 989e12,
    ib_bytes_per_s: float = 50e9,
    dispatch_bytes: int = 1,
    combine_bytes: int = 2,
    grad_bytes: int = 2,
) -> dict:
    """Compute time vs InfiniBand time for one token arriving at one node, computed from published figures.

    Per (token, destination node): the node's GPUs run ``experts_per_node``
    SwiGLU experts (``2 * 3 * hidden * expert_ffn`` FLOPs each forward, three
    times that forward + backward) at the dense BF16 peak, while the token
    crosses InfiniBand four times: dispatch in FP8 (``dispatch_bytes``), combine
    in BF16, and the two gradients of those in BF16 during backward.  A node
    has as many InfiniBand ports as GPUs, so the per-GPU ratio equals this one.
    Explained in chapter 9; these are peak figures, not measurements.
    """
    compute_s = 3 * experts_per_node * 2 * 3 * hidden * expert_ffn / flops
    comm_s = hidden * (dispatch_bytes + combine_bytes + 2 * grad_bytes) / ib_bytes_per_s
    return {"compute_s": compute_s, "comm_s": comm_s, "compute_over_comm": compute_s / comm_s}

"""Is the all-to-all hidden behind the experts' compute? Measured overlap, and DeepSeek-V3's ratio on paper."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from ...moe import Expert, run_experts


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

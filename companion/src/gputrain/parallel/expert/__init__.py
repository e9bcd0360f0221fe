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

One mechanism per module.  Imports go one way, down this list: a module may
import those above it, never one below::

    exchange  all_to_all with its backward, A2ATraffic, node_traffic_bytes
       |
    layer     ExpertParallelMoE, expert_parallel_group, check_expert_split
       |
    checks    per-rank checks against one process, node limits, bias sync
    timing    overlap_timing, v3_compute_comm_ratio          (imports no sibling)

Every name is re-exported here, so ``expert.ExpertParallelMoE`` works as it
always did.
"""

from __future__ import annotations

from .checks import bias_sync_check, expert_parallel_check, node_limited_check
from .exchange import A2ATraffic, all_to_all, node_traffic_bytes
from .layer import ExpertParallelMoE, check_expert_split, expert_parallel_group
from .timing import V3_FIGURES, overlap_timing, v3_compute_comm_ratio

__all__ = [
    # exchange
    "A2ATraffic",
    "all_to_all",
    "node_traffic_bytes",
    # layer
    "check_expert_split",
    "expert_parallel_group",
    "ExpertParallelMoE",
    # checks
    "expert_parallel_check",
    "node_limited_check",
    "bias_sync_check",
    # timing
    "overlap_timing",
    "V3_FIGURES",
    "v3_compute_comm_ratio",
]

"""A parallel layout planner: TP x CP x PP x DP (+ ZeRO, + EP) for a model on a cluster (chapters 8, 8b and 9).

**A model, not a measurement.**  Choosing a layout for hundreds of GPUs cannot
be run on a laptop, so this module estimates it from first principles: the
memory each GPU must hold (from :mod:`gputrain.memory`) and the time each kind
of communication takes on the links it crosses (ring all-reduce time,
2(N-1)/N * bytes / bandwidth, from :mod:`gputrain.parallel.ring`).  The
structure follows Megatron-LM (Narayanan et al. 2021): tensor-parallel ranks
are neighbours (same node, NVLink), pipeline stages next, data-parallel
replicas outermost.

Per training step, for one GPU and no overlap of communication with compute:

* compute: the training FLOPs of :mod:`gputrain.flops` (6N + 12LTC per
  token, one forward pass more with full recomputation) spread over all GPUs
  at an assumed fraction of peak, plus the pipeline bubble, (p - 1) / m of it;
* tensor parallel: per layer and micro-batch, 2 all-reduces of b*s*h
  activations forward and 2 backward (2 more in the recomputed forward), over
  NVLink if the TP group fits in a node, else the network;
* pipeline: each micro-batch's activation forward and its gradient backward
  across a stage boundary;
* context parallel (chapter 8b): ring attention passes each layer's K and V
  blocks round the CP group, 2(c-1) blocks forward and 4(c-1)+2 backward
  (:func:`gputrain.parallel.context.ring_bytes`), each b·(s/c)·h/t values;
* data parallel: one all-reduce of this GPU's gradients (bf16) per step, over
  the DP x CP ranks that hold the same weights;
* expert parallel (chapter 9, MoE models only): each MoE layer's dispatch and
  combine all-to-alls, 2·N·k·C·bytes·(EP-1)/EP per micro-batch forward and
  the same backward (:func:`all_to_all_bytes`), the in-node share over
  NVLink and the rest over the network at the same time.

Sequence parallelism is an explicit switch: with it (Megatron's default)
every activation is divided by t; without it, Korthikanti et al.'s
sbh(10 + 24/t + 5as/(ht)) per layer.  Ranks are placed TP innermost, then
CP, PP and DP outermost.  Each parallel dimension has its own small block
below (validation, memory divisor, communication time).

Expert parallelism is the one dimension that is not a new factor of the
world: its ranks are carved out of the data-parallel ranks (DeepSeek-V3's
layout), so EP divides DP; routed experts are split over EP, everything else
is replicated over DP.  The EP ranks are placed inside the pipeline stage,
next to CP (consecutive DP replicas), so a small EP group stays in a node.
An MoE model is a :class:`gputrain.memory.MoEShape` (or a ``GPTConfig`` with
``n_experts``); its compute counts the *active* parameters and its memory
comes from :func:`gputrain.memory.expert_parallel_memory`, stage by stage.

One mechanism per module.  Imports go one way, down this list: a module may
import those above it, never one below::

    cluster         Cluster, Layout, ACT_BYTES; GPT-3, DeepSeek-V3 and their clusters
       |
    gpu_memory      memory_per_gpu, moe_memory_per_gpu         (imports no sibling)
    expert_traffic  EP checks, all_to_all_bytes, all-to-all seconds
       |
    step_time       seconds per step by part, link by link
       |
    search          evaluate, plan, best, explain
    drawing         draw_layout: one square per GPU            (imports cluster)

Every name is re-exported here, so ``planner.evaluate`` works as it always did.
"""

from .cluster import ACT_BYTES, Cluster, Layout, deepseek_v3, gpt3, h100_cluster, h800_cluster
from .drawing import draw_layout
from .expert_traffic import all_to_all_bytes
from .gpu_memory import memory_per_gpu, moe_memory_per_gpu
from .search import best, evaluate, explain, plan

__all__ = [
    # cluster
    "ACT_BYTES",
    "Cluster",
    "Layout",
    "gpt3",
    "h100_cluster",
    "h800_cluster",
    "deepseek_v3",
    # gpu_memory
    "memory_per_gpu",
    "moe_memory_per_gpu",
    # expert_traffic
    "all_to_all_bytes",
    # search
    "evaluate",
    "plan",
    "explain",
    "best",
    # drawing
    "draw_layout",
]

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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import matplotlib.pyplot as plt

from ..flops import forward_flops_per_token, train_flops_per_token
from ..memory import MoEShape, deepseek_v3_shape, estimate, expert_parallel_memory, get_recipe, moe_shape, shape_of
from ..model import GPTConfig, gpt_num_params
from .context import ring_bytes
from .expert import check_expert_split
from .pipeline import split_layers
from .ring import ring_all_reduce_time
from .sequence import korthikanti_per_layer
from .tensor import shard_range

ACT_BYTES = 2  # bf16 activations and gradients on the wire


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """GPUs and their links.  Bandwidths are bytes/s per GPU per direction."""

    name: str = "cluster"
    gpus: int  # GPUs in total
    gpus_per_node: int = 8  # GPUs joined by NVLink
    memory: float = 80e9  # bytes of memory per GPU
    nvlink: float = 450e9  # H100 NVLink 4: 900 GB/s counting both directions
    network: float = 50e9  # one 400 Gb/s InfiniBand NDR port per GPU
    peak_flops: float = 989e12  # dense bf16 peak (H100 SXM datasheet)
    efficiency: float = 0.4  # assumed fraction of peak the matrix products reach

    def __post_init__(self) -> None:
        if self.gpus < 1 or self.gpus_per_node < 1 or self.gpus % min(self.gpus, self.gpus_per_node):
            raise ValueError(f"{self.gpus} GPUs do not fill nodes of {self.gpus_per_node}; use a whole number of nodes")


@dataclass
class Layout:
    """One way to place a model on a cluster, with its estimated memory and step time."""

    tp: int  # tensor-parallel degree (ranks splitting each layer)
    pp: int  # pipeline stages
    dp: int  # data-parallel replicas
    micro_batch: int  # sequences per micro-batch b
    microbatches: int  # micro-batches per step per replica m
    recompute: bool  # full activation recomputation
    cp: int = 1  # context-parallel degree (ranks splitting each sequence)
    sp: bool = True  # sequence parallelism alongside TP
    ep: int = 1  # expert-parallel degree (carved out of the DP ranks; MoE models only)
    stage: int = 0  # the pipeline stage whose memory is reported (the busiest one)
    memory: dict[str, float] = field(default_factory=dict)  # bytes per GPU by component (first stage)
    seconds: dict[str, float] = field(default_factory=dict)  # estimated time per step by part
    links: dict[str, str] = field(default_factory=dict)  # which link each kind of traffic crosses
    fits: bool = False

    @property
    def step_seconds(self) -> float:
        return sum(self.seconds.values())

    @property
    def memory_total(self) -> float:
        return sum(self.memory.values())

    def label(self) -> str:
        cp = f" x CP{self.cp}" if self.cp > 1 else ""
        return (
            f"TP{self.tp}{cp} x PP{self.pp} x DP{self.dp}"
            + (f" (EP{self.ep} inside DP)" if self.ep > 1 else "")
            + ("" if self.sp else " (no SP)")
            + (" +recompute" if self.recompute else "")
        )


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


def gpt3(seq_len: int = 2048) -> GPTConfig:
    """GPT-3 175B's shape (Brown et al. 2020): 96 layers, h = 12288, 96 heads, 2048-token context."""
    return GPTConfig(vocab_size=50257, block_size=seq_len, n_layer=96, n_head=96, n_embd=12288)


def h100_cluster(gpus: int = 1024) -> Cluster:
    """H100 80 GB nodes of 8 with NVLink 4 and one 400 Gb/s InfiniBand port per GPU."""
    return Cluster(name=f"{gpus} x H100", gpus=gpus)


def h800_cluster(gpus: int = 2048) -> Cluster:
    """DeepSeek-V3's training cluster: H800 80 GB nodes of 8, with the report's link figures.

    NVLink 160 GB/s and InfiniBand 50 GB/s per GPU, as DeepSeek-V3's report
    gives them; the H800 kept the H100's arithmetic (989 TFLOP/s dense BF16).
    """
    return Cluster(name=f"{gpus} x H800", gpus=gpus, nvlink=160e9, network=50e9)


def deepseek_v3(seq_len: int = 4096) -> MoEShape:
    """DeepSeek-V3 (671 B total, 37 B active, + the MTP module) at its 4K pre-training length."""
    return deepseek_v3_shape(seq_len=seq_len)


def best(layouts: list[Layout]) -> Optional[Layout]:
    """The fastest layout that fits, or None."""
    return next((lay for lay in layouts if lay.fits), None)


def draw_layout(ax, layout: Layout, cluster: Cluster) -> None:
    """Draw every GPU of ``layout``: one row per data-parallel replica, pipeline stages left to right.

    Ranks are numbered tensor-parallel first, then pipeline, then data
    parallel (Megatron's placement), so consecutive squares share a node;
    thick lines mark node boundaries, where traffic leaves NVLink.
    """
    cmap = plt.get_cmap("tab20")
    group = layout.tp * layout.cp  # GPUs of one pipeline stage
    width = layout.pp * group  # GPUs in one replica: one row
    for replica in range(layout.dp):
        for stage in range(layout.pp):
            for t in range(group):
                x = stage * group + t
                ax.add_patch(plt.Rectangle((x, replica), 1, 0.8, color=cmap(stage % 20), lw=0))
        for start in range(0, width + 1, cluster.gpus_per_node):  # rank = x + replica * width
            ax.plot([start, start], [replica - 0.05, replica + 0.85], color="k", lw=1.2)
    ax.set_xlim(-0.5, width + 0.5)
    ax.set_ylim(layout.dp, -0.2)
    ax.set_xlabel(
        f"pipeline stage (colour), {group} tensor-/context-parallel GPUs each; black lines: node boundaries", fontsize=9
    )
    ax.set_ylabel("data-parallel replica")
    ax.set_yticks([r + 0.4 for r in range(layout.dp)], [str(r) for r in range(layout.dp)])
    ax.set_xticks([])
    ax.set_title(f"{layout.label()} on {cluster.gpus} GPUs: one square per GPU")

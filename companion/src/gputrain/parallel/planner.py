"""A parallel layout planner: TP x CP x PP x DP (+ ZeRO) for a model on a cluster (chapters 8 and 8b).

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
  the DP x CP ranks that hold the same weights.

Sequence parallelism is an explicit switch: with it (Megatron's default)
every activation is divided by t; without it, Korthikanti et al.'s
sbh(10 + 24/t + 5as/(ht)) per layer.  Ranks are placed TP innermost, then
CP, PP and DP outermost.  Each parallel dimension has its own small block
below (validation, memory divisor, communication time), so another one
(expert parallelism) slots in the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..flops import forward_flops_per_token, train_flops_per_token
from ..model import GPTConfig, gpt_num_params
from .context import ring_bytes
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
            raise ValueError(f"{self.gpus} GPUs do not fill nodes of {self.gpus_per_node}; "
                             "use a whole number of nodes")


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
        return (f"TP{self.tp}{cp} x PP{self.pp} x DP{self.dp}" + ("" if self.sp else " (no SP)")
                + (" +recompute" if self.recompute else ""))


def memory_per_gpu(model: GPTConfig, tp: int, pp: int, dp: int, micro_batch: int, microbatches: int,
                   recompute: bool, zero_stage: int = 1, *, sequence_parallel: bool = True, cp: int = 1,
                   flash_attention: bool = False) -> dict[str, float]:
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
    from ..memory import estimate, shape_of

    shape = shape_of(model)
    layers = len(split_layers(model.n_layer, pp)[0])
    stage_params = (layers * shape.layer_params + model.vocab_size * model.n_embd) / tp  # + the embedding
    states = estimate(stage_params, zero_stage=zero_stage, dp=dp * cp)  # a count: model states only
    in_flight = min(pp, microbatches)
    s, b, h, a = model.block_size // cp, micro_batch, model.n_embd, model.n_head
    if recompute:
        per_layer = 2 * s * b * h / (tp if sequence_parallel else 1)  # only the layer's input is kept
    else:
        per_layer = korthikanti_per_layer(s, b, h, a, tp, sequence_parallel)
        if flash_attention:
            per_layer -= 5 * a * s * s * b / tp  # no stored attention matrix
    acts = per_layer * layers * in_flight
    return {"weights": states.parameters, "gradients": states.gradients,
            "optimizer (master, m, v)": states.master_weights + states.optimizer_states, "activations": acts}


def evaluate(model: GPTConfig, cluster: Cluster, tp: int, pp: int, global_batch: int, micro_batch: int = 1,
             recompute: bool = False, zero_stage: int = 1, *, cp: int = 1, sequence_parallel: bool = True,
             flash_attention: bool = False) -> Layout:
    """Memory and estimated step time of one TP x CP x PP x DP layout."""
    shard_range(model.n_embd, tp, 0, "hidden size")  # TP splits h (and the heads) evenly
    shard_range(model.n_head, tp, 0, "number of heads")
    split_layers(model.n_layer, pp)  # at least one layer per stage
    if cp < 1 or model.block_size % (2 * cp):
        raise ValueError(f"sequence length {model.block_size} is not divisible by 2 x CP degree = {2 * cp} "
                         "(the zig-zag split); pick a CP degree that divides half the sequence")
    if cluster.gpus % (tp * cp * pp):
        raise ValueError(f"TP{tp} x CP{cp} x PP{pp} = {tp * cp * pp} GPUs does not divide the cluster's "
                         f"{cluster.gpus}")
    dp = cluster.gpus // (tp * cp * pp)
    if global_batch % (dp * micro_batch):
        raise ValueError(f"global batch {global_batch} is not a multiple of DP{dp} x micro-batch {micro_batch}")
    m = global_batch // (dp * micro_batch)
    layout = Layout(tp=tp, pp=pp, dp=dp, micro_batch=micro_batch, microbatches=m, recompute=recompute, cp=cp,
                    sp=sequence_parallel)
    layout.memory = memory_per_gpu(model, tp, pp, dp, micro_batch, m, recompute, zero_stage,
                                   sequence_parallel=sequence_parallel, cp=cp, flash_attention=flash_attention)
    layout.fits = layout.memory_total <= cluster.memory

    def link(span: int) -> tuple[float, str]:  # a group of `span` consecutive GPUs
        return (cluster.nvlink, "NVLink") if span <= cluster.gpus_per_node else (cluster.network, "network")

    n_params = gpt_num_params(model)
    shape = (n_params, model.n_layer, model.block_size, model.n_embd)
    per_token = train_flops_per_token(*shape) + (forward_flops_per_token(*shape) if recompute else 0)
    flops = per_token * global_batch * model.block_size
    compute = flops / (cluster.gpus * cluster.peak_flops * cluster.efficiency)
    layers = model.n_layer / pp
    act = micro_batch * model.block_size // cp * model.n_embd * ACT_BYTES  # one b x s/c x h message
    tp_bw, layout.links["TP"] = link(tp)
    cp_bw, cp_link = link(tp * cp)  # CP neighbours are tp GPUs apart
    if cp > 1:
        layout.links["CP"] = cp_link
    pp_bw, layout.links["PP"] = link(tp * cp * pp)  # the next stage is tp x cp GPUs further on
    dp_bw, layout.links["DP"] = link(tp * cp * pp * dp)
    kv = ring_bytes(micro_batch, model.n_head // tp, model.block_size, model.n_embd // model.n_head, cp, ACT_BYTES)
    allreduces = (6 if recompute else 4) * layers * m  # per layer: 2 forward (+2 recomputed), 2 backward
    layout.seconds = {
        "compute": compute,
        "bubble": compute * (pp - 1) / m,
        "TP comm": allreduces * ring_all_reduce_time(act, tp, tp_bw) if tp > 1 else 0.0,
        "CP comm": (layers * m * (kv["forward"] * (2 if recompute else 1) + kv["backward"]) / cp_bw
                    if cp > 1 else 0.0),  # K, V (and dK, dV) round the ring; recomputation repeats the forward
        "PP comm": 2 * m * act / tp / pp_bw if pp > 1 else 0.0,  # each TP rank sends its 1/t share
        "DP comm": (ring_all_reduce_time(ACT_BYTES * n_params / (tp * pp), dp * cp, dp_bw)
                    if dp * cp > 1 else 0.0),  # CP ranks hold the same weights: they reduce too
    }
    return layout


def plan(model: GPTConfig, cluster: Cluster, global_batch: int, micro_batch: int = 1,
         zero_stage: int = 1, *, context: bool = False, sequence_parallel: bool = True,
         flash_attention: bool = False) -> list[Layout]:
    """Every valid layout (with and without recomputation, CP degrees too if ``context``); fitting, then fastest, first."""
    layouts, reason = [], None
    divisors = lambda n: (d for d in range(1, n + 1) if n % d == 0)  # noqa: E731
    for tp in divisors(cluster.gpus):
        for cp in divisors(cluster.gpus // tp) if context else (1,):
            for pp in divisors(cluster.gpus // (tp * cp)):
                for recompute in (False, True):
                    try:  # evaluate() is the one place that decides what a valid layout is
                        layouts.append(evaluate(model, cluster, tp, pp, global_batch, micro_batch, recompute,
                                                zero_stage, cp=cp, sequence_parallel=sequence_parallel,
                                                flash_attention=flash_attention))
                    except ValueError as exc:
                        reason = exc
    if not layouts:
        raise ValueError(f"no layout divides the cluster, the model and the batch (last reason: {reason}); "
                         "try another global batch")
    return sorted(layouts, key=lambda lay: (not lay.fits, lay.step_seconds))


def explain(layout: Layout, cluster: Cluster) -> str:
    """One paragraph on where a layout's time goes and which links carry what."""
    parts = ", ".join(f"{k} {v:.2f} s" for k, v in layout.seconds.items() if v > 0)
    fit = "fits" if layout.fits else "does NOT fit"
    return (f"{layout.label()}: {layout.memory_total / 1e9:.1f} GB per GPU ({fit} in "
            f"{cluster.memory / 1e9:.0f} GB); step {layout.step_seconds:.2f} s = {parts}; "
            f"TP over {layout.links['TP']}" + (f", CP over {layout.links['CP']}" if layout.cp > 1 else "")
            + f", PP over {layout.links['PP']}, DP over {layout.links['DP']}.")


def gpt3(seq_len: int = 2048) -> GPTConfig:
    """GPT-3 175B's shape (Brown et al. 2020): 96 layers, h = 12288, 96 heads, 2048-token context."""
    return GPTConfig(vocab_size=50257, block_size=seq_len, n_layer=96, n_head=96, n_embd=12288)


def h100_cluster(gpus: int = 1024) -> Cluster:
    """H100 80 GB nodes of 8 with NVLink 4 and one 400 Gb/s InfiniBand port per GPU."""
    return Cluster(name=f"{gpus} x H100", gpus=gpus)


def best(layouts: list[Layout]) -> Optional[Layout]:
    """The fastest layout that fits, or None."""
    return next((lay for lay in layouts if lay.fits), None)


def draw_layout(ax, layout: Layout, cluster: Cluster) -> None:
    """Draw every GPU of ``layout``: one row per data-parallel replica, pipeline stages left to right.

    Ranks are numbered tensor-parallel first, then pipeline, then data
    parallel (Megatron's placement), so consecutive squares share a node;
    thick lines mark node boundaries, where traffic leaves NVLink.
    """
    import matplotlib.pyplot as plt

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
    ax.set_xlabel(f"pipeline stage (colour), {group} tensor-/context-parallel GPUs each; "
                  f"black lines: node boundaries", fontsize=9)
    ax.set_ylabel("data-parallel replica")
    ax.set_yticks([r + 0.4 for r in range(layout.dp)], [str(r) for r in range(layout.dp)])
    ax.set_xticks([])
    ax.set_title(f"{layout.label()} on {cluster.gpus} GPUs: one square per GPU")

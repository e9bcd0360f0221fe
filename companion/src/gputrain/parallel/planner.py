"""A 3-D parallel layout planner: TP x PP x DP for a model on a cluster (chapter 8).

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
* data parallel: one all-reduce of this GPU's gradients (bf16) per step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..flops import forward_flops_per_token, train_flops_per_token
from ..model import GPTConfig, gpt_num_params
from .pipeline import split_layers
from .ring import ring_all_reduce_time
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
        return f"TP{self.tp} x PP{self.pp} x DP{self.dp}" + (" +recompute" if self.recompute else "")


def memory_per_gpu(model: GPTConfig, tp: int, pp: int, dp: int, micro_batch: int, microbatches: int,
                   recompute: bool, zero_stage: int = 1) -> dict[str, float]:
    """Bytes on the busiest GPU: the first pipeline stage, which holds the embedding and the most activations.

    Model states come from :func:`gputrain.memory.estimate` (bf16 mixed-precision
    Adam, 16 bytes per parameter, ZeRO over the ``dp`` replicas) for the
    stage's share of the parameters, divided by ``tp``.  Activations are
    Korthikanti et al.'s per-layer bytes (:func:`gputrain.memory.korthikanti_activations`)
    divided by ``tp``, which assumes Megatron's sequence parallelism alongside
    tensor parallelism; 1F1B keeps ``min(p, m)`` micro-batches of them alive.
    """
    from ..memory import estimate, korthikanti_activations, shape_of

    shape = shape_of(model)
    layers = len(split_layers(model.n_layer, pp)[0])
    stage_params = (layers * shape.layer_params + model.vocab_size * model.n_embd) / tp  # + the embedding
    states = estimate(stage_params, zero_stage=zero_stage, dp=dp)  # a count: model states only
    in_flight = min(pp, microbatches)
    acts = korthikanti_activations(model.block_size, micro_batch, model.n_embd, model.n_head, layers,
                                   recompute="full" if recompute else "none") / tp * in_flight
    return {"weights": states.parameters, "gradients": states.gradients,
            "optimizer (master, m, v)": states.master_weights + states.optimizer_states, "activations": acts}


def evaluate(model: GPTConfig, cluster: Cluster, tp: int, pp: int, global_batch: int, micro_batch: int = 1,
             recompute: bool = False, zero_stage: int = 1) -> Layout:
    """Memory and estimated step time of one TP x PP x DP layout."""
    shard_range(model.n_embd, tp, 0, "hidden size")  # TP splits h (and the heads) evenly
    shard_range(model.n_head, tp, 0, "number of heads")
    split_layers(model.n_layer, pp)  # at least one layer per stage
    if cluster.gpus % (tp * pp):
        raise ValueError(f"TP{tp} x PP{pp} = {tp * pp} GPUs does not divide the cluster's {cluster.gpus}")
    dp = cluster.gpus // (tp * pp)
    if global_batch % (dp * micro_batch):
        raise ValueError(f"global batch {global_batch} is not a multiple of DP{dp} x micro-batch {micro_batch}")
    m = global_batch // (dp * micro_batch)
    layout = Layout(tp=tp, pp=pp, dp=dp, micro_batch=micro_batch, microbatches=m, recompute=recompute)
    layout.memory = memory_per_gpu(model, tp, pp, dp, micro_batch, m, recompute, zero_stage)
    layout.fits = layout.memory_total <= cluster.memory

    def link(span: int) -> tuple[float, str]:  # a group of `span` consecutive GPUs
        return (cluster.nvlink, "NVLink") if span <= cluster.gpus_per_node else (cluster.network, "network")

    n_params = gpt_num_params(model)
    shape = (n_params, model.n_layer, model.block_size, model.n_embd)
    per_token = train_flops_per_token(*shape) + (forward_flops_per_token(*shape) if recompute else 0)
    flops = per_token * global_batch * model.block_size
    compute = flops / (cluster.gpus * cluster.peak_flops * cluster.efficiency)
    layers = model.n_layer / pp
    act = micro_batch * model.block_size * model.n_embd * ACT_BYTES  # one b x s x h message
    tp_bw, layout.links["TP"] = link(tp)
    pp_bw, layout.links["PP"] = link(tp * pp)  # the next stage is tp GPUs further on
    dp_bw, layout.links["DP"] = link(tp * pp * dp)
    allreduces = (6 if recompute else 4) * layers * m  # per layer: 2 forward (+2 recomputed), 2 backward
    layout.seconds = {
        "compute": compute,
        "bubble": compute * (pp - 1) / m,
        "TP comm": allreduces * ring_all_reduce_time(act, tp, tp_bw) if tp > 1 else 0.0,
        "PP comm": 2 * m * act / tp / pp_bw if pp > 1 else 0.0,  # each TP rank sends its 1/t share
        "DP comm": ring_all_reduce_time(ACT_BYTES * n_params / (tp * pp), dp, dp_bw) if dp > 1 else 0.0,
    }
    return layout


def plan(model: GPTConfig, cluster: Cluster, global_batch: int, micro_batch: int = 1,
         zero_stage: int = 1) -> list[Layout]:
    """Every valid TP x PP x DP layout (with and without recomputation), fitting ones first, fastest first."""
    layouts, reason = [], None
    divisors = lambda n: (d for d in range(1, n + 1) if n % d == 0)  # noqa: E731
    for tp in divisors(cluster.gpus):
        for pp in divisors(cluster.gpus // tp):
            for recompute in (False, True):
                try:  # evaluate() is the one place that decides what a valid layout is
                    layouts.append(evaluate(model, cluster, tp, pp, global_batch, micro_batch, recompute, zero_stage))
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
            f"TP over {layout.links['TP']}, PP over {layout.links['PP']}, DP over {layout.links['DP']}.")


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
    width = layout.pp * layout.tp  # GPUs in one replica: one row
    for replica in range(layout.dp):
        for stage in range(layout.pp):
            for t in range(layout.tp):
                x = stage * layout.tp + t
                ax.add_patch(plt.Rectangle((x, replica), 1, 0.8, color=cmap(stage % 20), lw=0))
        for start in range(0, width + 1, cluster.gpus_per_node):  # rank = x + replica * width
            ax.plot([start, start], [replica - 0.05, replica + 0.85], color="k", lw=1.2)
    ax.set_xlim(-0.5, width + 0.5)
    ax.set_ylim(layout.dp, -0.2)
    ax.set_xlabel(f"pipeline stage (colour), {layout.tp} tensor-parallel GPUs each; "
                  f"black lines: node boundaries", fontsize=9)
    ax.set_ylabel("data-parallel replica")
    ax.set_yticks([r + 0.4 for r in range(layout.dp)], [str(r) for r in range(layout.dp)])
    ax.set_xticks([])
    ax.set_title(f"{layout.label()} on {cluster.gpus} GPUs: one square per GPU")

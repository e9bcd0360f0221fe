"""The planner's inputs: a cluster of GPUs and its links, one layout's result, and the named examples.

:class:`Cluster` gives memory, bandwidths and peak per GPU; :class:`Layout`
holds one TP x CP x PP x DP (EP) placement with its memory and step time.
GPT-3 on H100s and DeepSeek-V3 on H800s are the book's two worked cases.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...memory import MoEShape, deepseek_v3_shape
from ...model import GPTConfig

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

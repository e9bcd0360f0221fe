"""The roofline (chapter 11, "The roofline"): FLOPs and bytes of the book's operations, and how long they take.

Every operation below is counted by formula and returned as an :class:`OpCost`:
its FLOPs, the bytes it must move between the chip and its main memory, and
the rule that counted them.  A :class:`Machine` has two roofs, a peak FLOP/s
and a memory bandwidth, taken from the GPU table
(:meth:`Machine.from_gpu`, :data:`gputrain.device.GPU_SPECS`) or measured on
this machine with the probes of :mod:`gputrain.speed`
(:meth:`Machine.measure`).  It predicts an operation's time as the slower of
the two::

    t = max(FLOPs / peak, bytes / bandwidth)

so an operation whose arithmetic intensity (FLOPs per byte) is below the
machine's ridge point, peak / bandwidth, waits on memory, and one above it
waits on arithmetic.  :func:`check_cpu_roofline` times real operations on this
CPU against that prediction.

Counting rules, shared by every function: a FLOP is one add or multiply (a
multiply-add is two), as in :mod:`gputrain.flops`, whose
:data:`~gputrain.flops.ELEMENTWISE_FLOPS` gives the elementwise costs; bytes
are the traffic of one kernel per operation that reads each input once and
writes each output once, nothing kept on chip between operations.  That is a
lower bound for a real kernel and the exact traffic of a perfect one.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

import torch

from .device import Timer, gpu_spec
from .flops import ELEMENTWISE_FLOPS
from .speed import cpu_threads

if TYPE_CHECKING:  # only for the annotation: roofline reads a GPT's shape, never builds one
    from .model import GPTConfig

__all__ = [
    "OpCost",
    "matmul",
    "add",
    "layernorm",
    "gelu",
    "softmax",
    "attention_naive",
    "attention_tiled",
    "adamw_step",
    "all_reduce",
    "gpt_matmuls",
    "gpt_operations",
    "ADAMW_FLOPS_PER_PARAM",
    "Machine",
    "Agreement",
    "CPU_TOLERANCE",
    "check_cpu_roofline",
    "on_a_cpu",
    "WRITE_ALLOCATE",
]


@dataclass(frozen=True)
class OpCost:
    """FLOPs and main-memory bytes of one operation, counted by formula (chapter 11)."""

    name: str
    flops: float
    bytes: float  # moved between the chip and its main memory (HBM on a GPU, DRAM on a CPU)
    rule: str  # how the two were counted, in one sentence
    scratch: float = 0.0  # bytes of intermediate results the operation keeps in main memory

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: FLOPs per byte moved."""
        return self.flops / self.bytes


def _check_sizes(**sizes: int) -> None:
    bad = {k: v for k, v in sizes.items() if not (isinstance(v, int) and v >= 1)}
    if bad:
        shown = ", ".join(f"{k}={v!r}" for k, v in bad.items())
        raise ValueError(f"sizes must be positive integers, got {shown}")


# --- operations ----------------------------------------------------------------------


def matmul(m: int, k: int, n: int, itemsize: int = 2, bias: bool = False, name: str = "") -> OpCost:
    """``(m x k) @ (k x n)``, plus a bias row if ``bias``: ``2mkn`` FLOPs, A, B and C each crossing memory once."""
    _check_sizes(m=m, k=k, n=n, itemsize=itemsize)
    return OpCost(
        name=name or f"matmul {m}x{k} @ {k}x{n}",
        flops=2 * m * k * n + (m * n if bias else 0),
        bytes=itemsize * (m * k + k * n + m * n + (n if bias else 0)),
        rule="2mkn FLOPs (one multiply and one add per term); A and B read once, C written once",
    )


def add(n: int, itemsize: int = 4) -> OpCost:
    """``c = a + b`` on ``n`` elements: one FLOP per element against three elements of traffic."""
    _check_sizes(n=n, itemsize=itemsize)
    return OpCost(
        name=f"add of {n:,} elements",
        flops=n,
        bytes=3 * n * itemsize,
        rule="one add per element; a and b read, c written",
    )


def layernorm(rows: int, cols: int, itemsize: int = 4) -> OpCost:
    """LayerNorm over the last dimension in one fused pass: x read once, y written once, plus the gain and bias."""
    _check_sizes(rows=rows, cols=cols, itemsize=itemsize)
    per = ELEMENTWISE_FLOPS["native_layer_norm"]
    return OpCost(
        name=f"LayerNorm {rows}x{cols}",
        flops=per * rows * cols,
        bytes=itemsize * (2 * rows * cols + 2 * cols),
        rule=f"{per:g} FLOPs per element (mean, variance, normalize, scale, shift); x read, y written, "
        "gain and bias read",
    )


def gelu(n: int, itemsize: int = 4) -> OpCost:
    """GELU on ``n`` elements: a handful of FLOPs per element, one read and one write."""
    _check_sizes(n=n, itemsize=itemsize)
    per = ELEMENTWISE_FLOPS["gelu"]
    return OpCost(
        name=f"GELU of {n:,} elements",
        flops=per * n,
        bytes=2 * n * itemsize,
        rule=f"{per:g} FLOPs per element (the tanh form's polynomial and tanh); x read, y written",
    )


def softmax(rows: int, cols: int, itemsize: int = 4, fused: bool = True) -> OpCost:
    """Softmax along each of ``rows`` rows of ``cols``: fused, one read and one write per element.

    ``fused=False`` counts eager PyTorch's five separate passes (row max,
    subtract, exp, row sum, divide), each reading its inputs from memory and
    writing its result back: 8 elements of traffic per element, plus 4 per
    row for the two row statistics.
    """
    _check_sizes(rows=rows, cols=cols, itemsize=itemsize)
    per = ELEMENTWISE_FLOPS["_softmax"]
    elements = 2 * rows * cols if fused else 8 * rows * cols + 4 * rows
    how = (
        "x read once, y written once" if fused else "five passes: max, subtract, exp, sum, divide, each through memory"
    )
    return OpCost(
        name=f"softmax {rows}x{cols}" + ("" if fused else " (unfused)"),
        flops=per * rows * cols,
        bytes=itemsize * elements,
        rule=f"{per:g} FLOPs per element (max, subtract, exp, sum, divide); {how}",
    )


def _attention_flops(batch: int, heads: int, seq: int, head_dim: int) -> float:
    # two products of (T x d) by (d x T) and (T x T) by (T x d) per head, and the softmax of the T x T scores;
    # the full square, as torch's counter and chapter 2 count it (a causal kernel can skip half)
    return batch * heads * (4 * seq * seq * head_dim + ELEMENTWISE_FLOPS["_softmax"] * seq * seq)


def attention_naive(batch: int, heads: int, seq: int, head_dim: int, itemsize: int = 2) -> OpCost:
    """Attention forward in three kernels: S = QKᵀ, P = softmax(S), O = PV, with S and P stored in memory.

    Traffic per head: Q, K, V read and O written (4Td), the T x T scores
    written and read back, the probabilities written and read back (4T²).
    It grows as T².
    """
    _check_sizes(batch=batch, heads=heads, seq=seq, head_dim=head_dim, itemsize=itemsize)
    bh, t, d = batch * heads, seq, head_dim
    return OpCost(
        name=f"attention, naive (T={t}, d={d})",
        flops=_attention_flops(batch, heads, seq, head_dim),
        bytes=itemsize * bh * (4 * t * d + 4 * t * t),
        rule="4T²d + 5T² FLOPs per head; Q, K, V read, O written, scores and probabilities each written and read back",
        scratch=itemsize * bh * 2 * t * t,
    )


def attention_tiled(batch: int, heads: int, seq: int, head_dim: int, block: int = 64, itemsize: int = 2) -> OpCost:
    """FlashAttention's forward: scores stay on chip; each block of ``block`` queries streams all of K and V.

    Traffic per head: Q read and O written once (2Td), K and V read once per
    query block (2Td x ceil(T / block)).  For a fixed block that still grows
    as T², but by 2d / block elements per score where the naive version pays
    4, and nothing of size T x T is ever stored: what stays in memory is one
    fp32 log-sum-exp per row for the backward pass, which grows as T.
    """
    _check_sizes(batch=batch, heads=heads, seq=seq, head_dim=head_dim, block=block, itemsize=itemsize)
    bh, t, d = batch * heads, seq, head_dim
    q_blocks = math.ceil(t / block)
    return OpCost(
        name=f"attention, tiled (T={t}, d={d}, block={block})",
        flops=_attention_flops(batch, heads, seq, head_dim),
        bytes=itemsize * bh * (2 * t * d + 2 * t * d * q_blocks),
        rule=f"4T²d + 5T² FLOPs per head; Q read and O written once, K and V read once per block of {block} queries",
        scratch=4 * bh * t,
    )


# Per parameter, torch.optim.AdamW's update (bias corrections are per-tensor scalars):
# decay p *= 1 - lr*wd (1); m = b1*m + (1-b1)*g (3); v = b2*v + (1-b2)*g*g (4);
# denom = sqrt(v)/sqrt(c2) + eps (3); p -= (lr/c1) * m/denom (3).
ADAMW_FLOPS_PER_PARAM = 1 + 3 + 4 + 3 + 3


def adamw_step(n_params: int, itemsize: int = 4) -> OpCost:
    """One AdamW update of ``n_params`` fp32 parameters in one fused pass (chapter 11, "The roofline").

    Reads the parameter, its gradient and the two moments (16 bytes), writes
    the parameter and both moments back (12 bytes): 28 bytes per parameter
    for :data:`ADAMW_FLOPS_PER_PARAM` = 14 FLOPs, 0.5 FLOP per byte.
    """
    _check_sizes(n_params=n_params, itemsize=itemsize)
    return OpCost(
        name=f"AdamW step, {n_params:,} parameters",
        flops=ADAMW_FLOPS_PER_PARAM * n_params,
        bytes=(4 + 3) * itemsize * n_params,
        rule=(
            f"{ADAMW_FLOPS_PER_PARAM} FLOPs per parameter (decay 1, first moment 3, second moment 4, "
            "denominator 3, update 3); parameter, gradient and both moments read, all but the gradient written"
        ),
    )


def all_reduce(n_elements: int, ranks: int, itemsize: int = 4) -> OpCost:
    """Ring all-reduce of ``n_elements`` per rank (chapter 8): bytes each rank sends, and the additions it does.

    Reduce-scatter then all-gather: each rank sends 2(N - 1)/N of the buffer
    and adds (N - 1)/N of its elements, so the intensity is 1 / (2 x itemsize)
    FLOPs per byte sent, whatever N.  The roof that binds is the link, not
    the arithmetic.
    """
    _check_sizes(n_elements=n_elements, ranks=ranks, itemsize=itemsize)
    if ranks < 2:
        raise ValueError(f"an all-reduce needs at least 2 ranks, got ranks={ranks}")
    share = (ranks - 1) / ranks
    return OpCost(
        name=f"ring all-reduce, {n_elements:,} elements over {ranks} ranks",
        flops=share * n_elements,
        bytes=2 * share * n_elements * itemsize,
        rule="bytes sent per rank, 2(N-1)/N of the buffer; one add per element received in the reduce-scatter",
    )


def gpt_matmuls(cfg: "GPTConfig", tokens: int, itemsize: int = 2) -> list[OpCost]:
    """The matrix products of one dense GPT block and the LM head, for ``tokens`` = batch x sequence rows."""
    _check_sizes(tokens=tokens)
    c, v, bias = cfg.n_embd, cfg.vocab_size, cfg.bias
    shapes = [
        ("QKV projection", c, 3 * c, bias),
        ("attention output", c, c, bias),
        ("MLP up", c, 4 * c, bias),
        ("MLP down", 4 * c, c, bias),
        ("LM head", c, v, False),
    ]
    return [matmul(tokens, k, n, itemsize, b, name=f"{label} ({tokens}x{k} @ {k}x{n})") for label, k, n, b in shapes]


def gpt_operations(
    cfg: "GPTConfig", batch: int, seq_len: Optional[int] = None, itemsize: int = 2, block: Optional[int] = None
) -> list[OpCost]:
    """Every operation of one dense GPT block's forward pass, then the LM head, in the order they run.

    Attention is :func:`attention_naive`, or :func:`attention_tiled` with a
    ``block`` of queries.  ``seq_len`` defaults to the model's context.
    """
    t = seq_len or cfg.block_size
    _check_sizes(batch=batch, seq_len=t)
    rows, c, h = batch * t, cfg.n_embd, cfg.n_head
    qkv, proj, up, down, head = gpt_matmuls(cfg, rows, itemsize)
    attn = (
        attention_naive(batch, h, t, c // h, itemsize)
        if block is None
        else attention_tiled(batch, h, t, c // h, block, itemsize)
    )
    return [
        layernorm(rows, c, itemsize),
        qkv,
        attn,
        proj,
        layernorm(rows, c, itemsize),
        up,
        gelu(rows * 4 * c, itemsize),
        down,
        head,
    ]


# --- machines ------------------------------------------------------------------------


@dataclass(frozen=True)
class Machine:
    """Two roofs: a peak FLOP/s and a memory bandwidth (chapter 11, "The roofline")."""

    name: str
    peak: float  # FLOP/s
    bandwidth: float  # bytes/s
    source: str = ""  # where the two numbers come from

    def __post_init__(self) -> None:
        if not (self.peak > 0 and self.bandwidth > 0):
            raise ValueError(f"a machine needs a positive peak and bandwidth, got {self.peak} and {self.bandwidth}")

    @property
    def ridge(self) -> float:
        """FLOPs per byte at which the two roofs meet: below it memory binds, above it arithmetic."""
        return self.peak / self.bandwidth

    def attainable(self, intensity: float) -> float:
        """The roofline: FLOP/s reachable at an arithmetic intensity, ``min(peak, bandwidth x intensity)``."""
        return min(self.peak, self.bandwidth * intensity)

    def predict_seconds(self, op: OpCost) -> float:
        """The time the slower roof allows: ``max(flops / peak, bytes / bandwidth)``."""
        return max(op.flops / self.peak, op.bytes / self.bandwidth)

    def bound(self, op: OpCost) -> str:
        """``"memory"`` or ``"compute"``: which roof decides ``op``'s time here."""
        return "memory" if op.bytes / self.bandwidth > op.flops / self.peak else "compute"

    @classmethod
    def from_gpu(cls, name: str, dtype: str = "bf16") -> "Machine":
        """A GPU's datasheet roofs: the dense peak of ``dtype`` and the HBM bandwidth, from the GPU table."""
        spec = gpu_spec(name)
        peak = spec.peaks.get(dtype) if spec else None
        if spec is None or peak is None or spec.hbm_bandwidth is None:
            raise ValueError(
                f"no {dtype} peak and HBM bandwidth for {name!r} in gputrain.device.GPU_SPECS; "
                "try A100, H100, H800 or H200 with fp32, tf32, bf16, fp16 or fp8"
            )
        return cls(f"{spec.model}, {dtype}", peak, spec.hbm_bandwidth, "datasheet: " + ", ".join(spec.sources["peaks"]))

    @classmethod
    def measure(cls, threads: int = 1, rounds: int = 5, copy_bytes: int = 1 << 26, matmul_n: int = 512) -> "Machine":
        """This CPU's roofs, measured on ``threads`` threads with the probes of :mod:`gputrain.speed`.

        Bandwidth: a copy of ``copy_bytes`` (read and written, like
        :func:`gputrain.speed.copy_bandwidth`); peak: an fp32
        ``matmul_n`` cube (like :func:`gputrain.speed.matmul_tflops`).  The
        two probes alternate for ``rounds`` rounds and each roof is the median.
        """
        probes = _Probes(copy_bytes, matmul_n)
        med = _interleaved_medians({"copy": probes.copy, "probe": probes.matmul}, rounds, threads)
        return probes.machine(med["copy"], med["probe"], threads)


# A CPU's store to a cache line it does not hold first reads that line from memory (write-allocate):
# an operation that writes a fresh output moves its bytes once more.  An update in place (AdamW) does
# not, since the lines it writes are the ones it has just read.  GPUs write whole sectors without it.
WRITE_ALLOCATE = 1


def on_a_cpu(op: OpCost, fresh_output_bytes: float) -> OpCost:
    """``op`` as a CPU's memory sees it: plus the read of each line of a freshly written output."""
    return dataclasses.replace(
        op, bytes=op.bytes + WRITE_ALLOCATE * fresh_output_bytes, rule=op.rule + "; plus the CPU's write-allocate read"
    )


class _Probes:
    """The two roof probes, on buffers allocated once."""

    def __init__(self, copy_bytes: int, matmul_n: int):
        _check_sizes(copy_bytes=copy_bytes, matmul_n=matmul_n)
        gen = torch.Generator().manual_seed(0)
        self.src = torch.randn(copy_bytes // 4, generator=gen)
        self.dst = torch.empty_like(self.src)
        self.a = torch.randn(matmul_n, matmul_n, generator=gen)
        self.b = torch.randn(matmul_n, matmul_n, generator=gen)
        self.c = torch.empty(matmul_n, matmul_n)
        self.n = matmul_n

    def copy(self) -> None:
        self.dst.copy_(self.src)

    def matmul(self) -> None:
        torch.mm(self.a, self.b, out=self.c)

    def machine(self, copy_seconds: float, matmul_seconds: float, threads: int) -> Machine:
        # the copy reads every source byte and writes every destination byte, and a CPU first reads each
        # destination cache line it is about to overwrite (write-allocate): three bytes cross for every two
        moved = (2 + WRITE_ALLOCATE) * self.src.numel() * 4
        return Machine(
            name=f"this CPU, {threads} thread{'s' if threads > 1 else ''}",
            peak=2 * self.n**3 / matmul_seconds,
            bandwidth=moved / copy_seconds,
            source=f"measured: {self.src.numel() * 4 / 2**20:.0f} MiB copy (write-allocate counted) and "
            f"fp32 {self.n}^3 matmul, medians",
        )


def _interleaved_medians(runs: dict[str, Callable[[], object]], rounds: int, threads: int) -> dict[str, float]:
    """Median seconds per call of each function, timed one after another in each of ``rounds`` rounds."""
    _check_sizes(rounds=rounds, threads=threads)
    times: dict[str, list[float]] = {key: [] for key in runs}
    with cpu_threads(threads), torch.no_grad():
        for _ in range(rounds):
            for key, fn in runs.items():
                times[key].append(_sample(fn))
    return {key: statistics.median(ts) for key, ts in times.items()}


def _sample(fn: Callable[[], object], min_seconds: float = 0.02) -> float:
    """Seconds per call of ``fn``, from one timed block of enough calls to last about ``min_seconds``."""
    fn()  # touch the buffers, so no sample pays for first-use page faults
    with Timer(torch.device("cpu")) as once:
        fn()
    calls = max(1, round(min_seconds / max(once.seconds, 1e-9)))
    with Timer(torch.device("cpu")) as block:
        for _ in range(calls):
            fn()
    return block.seconds / calls


# How far measured and predicted times may differ on this book's CPUs, either way.  Measured on a
# shared 2-core AMD EPYC at load averages of 5 to 9 (one thread; medians of 7 interleaved rounds).
# Before write-allocate was counted, the in-place AdamW step ran at 0.48-0.85 of its prediction (the
# copy probe's bandwidth counted 2 bytes for 3 moved); with it counted, see the chapter's figures.
# On two threads the shared cores made the matmul ratio fall to 0.41-0.63: measure on one.
CPU_TOLERANCE = 2.0


@dataclass(frozen=True)
class Agreement:
    """One operation timed on this CPU against the roofline's prediction."""

    op: OpCost
    measured: float  # median seconds
    predicted: float  # Machine.predict_seconds
    bound: str  # the roof that decides the prediction

    @property
    def ratio(self) -> float:
        """Measured over predicted time: 1 is perfect agreement, above 1 slower than the roofs allow."""
        return self.measured / self.predicted

    def within(self, factor: float = CPU_TOLERANCE) -> bool:
        """Whether measured and predicted time agree within ``factor`` either way."""
        return 1 / factor <= self.ratio <= factor


def check_cpu_roofline(
    threads: int = 1,
    rounds: int = 7,
    copy_bytes: int = 1 << 26,
    probe_n: int = 512,
    add_elements: int = 1 << 23,
    adamw_params: int = 1 << 23,
    matmul_shape: tuple[int, int, int] = (384, 1024, 768),
) -> tuple[Machine, list[Agreement]]:
    """Measure this CPU's roofline and time three operations against it (chapter 11, "The roofline").

    The operations: an elementwise add of ``add_elements`` fp32 values and a
    fused ``torch.optim.AdamW`` step on ``adamw_params`` parameters (both
    memory-bound), and an fp32 matmul of ``matmul_shape`` (m, k, n), not the
    probe's square (compute-bound).  Each round times the two roof probes and
    the three operations one after another, so a neighbour's load slows
    roofs and operations alike; every figure is the median over ``rounds``.
    One thread by default: on a small shared CPU a two-thread product waits
    for whichever core a neighbour holds, and the roofs stop describing it.
    Returns the measured machine and one :class:`Agreement` per operation;
    :data:`CPU_TOLERANCE` is how far they were seen to disagree.
    """
    _check_sizes(add_elements=add_elements, adamw_params=adamw_params)
    m, k, n = matmul_shape
    probes = _Probes(copy_bytes, probe_n)
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(add_elements, generator=gen), torch.randn(add_elements, generator=gen)
    z = torch.empty_like(x)
    a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
    c = torch.empty(m, n)
    param = torch.nn.Parameter(torch.randn(adamw_params, generator=gen))
    param.grad = torch.randn(adamw_params, generator=gen) * 1e-3
    opt = torch.optim.AdamW([param], lr=1e-4, fused=True)  # one pass over p, g, m, v: the counted traffic
    ops = {
        "add": (on_a_cpu(add(add_elements), 4 * add_elements), lambda: torch.add(x, y, out=z)),
        "adamw": (adamw_step(adamw_params), opt.step),
        "matmul": (matmul(m, k, n, itemsize=4), lambda: torch.mm(a, b, out=c)),
    }
    runs = {"copy": probes.copy, "probe": probes.matmul, **{key: fn for key, (_, fn) in ops.items()}}
    med = _interleaved_medians(runs, rounds, threads)
    machine = probes.machine(med["copy"], med["probe"], threads)
    rows = [Agreement(op, med[key], machine.predict_seconds(op), machine.bound(op)) for key, (op, _) in ops.items()]
    return machine, rows

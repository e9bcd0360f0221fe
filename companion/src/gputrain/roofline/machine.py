"""A machine's two roofs, from the GPU table or measured on this CPU, and the time they predict."""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Callable

import torch

from ..device import Timer, gpu_spec
from ..speed import cpu_threads
from .cost import OpCost, _check_sizes


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

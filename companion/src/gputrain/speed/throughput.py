"""Peaks and throughput for MFU: :func:`measured_peak`, :func:`peak_for_mfu`, :class:`ThroughputMeter`."""

from __future__ import annotations

import contextlib
import statistics
from typing import Optional, Sequence

import torch

from ..device import Timer, device, device_name, peak_flops
from .probes import MatmulProbe, matmul_sweep


def tokens_per_second(tokens: int, seconds: float) -> float:
    """Throughput of a measured block: ``tokens / seconds`` (one clear error for a zero or negative time)."""
    if not seconds > 0:
        raise ValueError(f"seconds must be > 0 to compute a rate, got {seconds}; time at least one step")
    return tokens / seconds


def measured_peak(
    dtypes: Sequence[str] = ("bf16",),
    sizes: Optional[Sequence[int]] = None,
    dev: Optional[torch.device] = None,
    target_seconds: float = 0.1,
) -> MatmulProbe:
    """The fastest square matrix product of a small sweep: a measured stand-in for the peak.

    On a GPU the default sizes are 4096 and 8192 (the bf16 product that gets
    closest to the datasheet); on a CPU, which has no datasheet entry here,
    256 and 512.  MFU against this peak says how close a run comes to what the
    chip's best matrix product actually reaches.
    """
    dev = dev or device()
    sizes = sizes or ((4096, 8192) if dev.type == "cuda" else (256, 512))
    return max(matmul_sweep(sizes, dtypes, dev, target_seconds), key=lambda p: p.tflops)


def peak_for_mfu(
    dtype: str = "bf16", measured: bool = False, dev: Optional[torch.device] = None
) -> tuple[Optional[float], str]:
    """``(peak FLOP/s, where it comes from)`` for MFU: the datasheet's, or measured with ``measured=True``.

    MFU is quoted against the dense BF16 peak whatever precision a run uses (it
    is the chip's best training rate), so an fp32 run shows how much it leaves
    unused.  A CPU has no datasheet entry: its peak is always measured.
    """
    dev = dev or device()
    sheet = peak_flops(dtype) if dev.type == "cuda" else None
    if sheet is not None and not measured:
        return sheet, f"datasheet dense {dtype} peak of {device_name(dev)}"
    if dev.type == "cpu":
        probe = measured_peak(("fp32", "bf16") if dtype == "bf16" else (dtype,), dev=dev)
    else:
        probe = measured_peak((dtype,), dev=dev)
    return (
        probe.tflops * 1e12,
        f"measured: best {probe.dtype} {probe.n}x{probe.n}x{probe.n} product on {device_name(dev)}",
    )


class ThroughputMeter:
    """Tokens per second of timed blocks of training steps: their median, GPU-correct.

    Each :meth:`measure` block is timed with :class:`gputrain.device.Timer`
    (CUDA events on a GPU, so queued kernels are waited for; ``perf_counter``
    on a CPU)::

        meter = ThroughputMeter()
        with meter.measure(tokens=steps * batch * seq_len):
            for _ in range(steps):
                step()
        meter.tokens_per_s
    """

    def __init__(self, dev: Optional[torch.device] = None):
        self.dev = dev or device()
        self.samples: list[tuple[int, float]] = []  # (tokens, seconds) per measured block

    @contextlib.contextmanager
    def measure(self, tokens: int):
        with Timer(self.dev) as t:
            yield t
        self.samples.append((tokens, t.seconds))

    @property
    def rates(self) -> list[float]:
        return [tokens_per_second(n, s) for n, s in self.samples]

    @property
    def tokens_per_s(self) -> float:
        """Median rate over the measured blocks (robust to one block slowed by a busy neighbour)."""
        if not self.samples:
            raise ValueError("no block measured yet; wrap some steps in meter.measure(tokens)")
        return statistics.median(self.rates)

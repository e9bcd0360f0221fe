"""Device and preset choice, the peak FLOP/s table, and timers.

One code path runs everywhere: :func:`preset` says ``"cpu"`` on a machine
without CUDA and ``"gpu"`` with it, and every chapter picks its sizes from it
with :func:`pick`.  The environment variable ``GPUTRAIN_PRESET`` overrides the
choice (for example to run the small sizes on a GPU).  Explained in the
introduction, "How to run this book".
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Callable, Optional, TypeVar

import accelerate
import torch

PRESETS = ("cpu", "gpu")
ENV_PRESET = "GPUTRAIN_PRESET"

T = TypeVar("T")


class PresetError(ValueError):
    """An unknown preset name (from ``GPUTRAIN_PRESET`` or a flag)."""


def check_preset(name: str) -> str:
    """Return ``name`` if it is a preset, else raise one clear error."""
    if name not in PRESETS:
        allowed = ", ".join(PRESETS)
        raise PresetError(
            f"{ENV_PRESET}={name!r} is not a preset; use one of: {allowed} "
            f"(or leave it unset to choose from the hardware)"
        )
    return name


def preset() -> str:
    """``"gpu"`` when CUDA is available, else ``"cpu"``; ``GPUTRAIN_PRESET`` overrides."""
    forced = os.environ.get(ENV_PRESET, "").strip()
    if forced:
        return check_preset(forced)
    return "gpu" if torch.cuda.is_available() else "cpu"


def pick(cpu: T, gpu: T, preset_name: Optional[str] = None) -> T:
    """The value for the current preset: ``pick(cpu=256, gpu=4096)``."""
    return gpu if (preset_name or preset()) == "gpu" else cpu


def device() -> torch.device:
    """The device the book's code runs on: the first CUDA GPU, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def device_name(dev: Optional[torch.device] = None) -> str:
    """A readable name: the GPU's marketing name or the CPU's."""
    dev = dev or device()
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return platform.processor() or platform.machine() or "cpu"


# Dense (no sparsity) peak tensor throughput per datasheet, in FLOP/s.
# H100/H200 SXM share one compute die, so their peaks are the same; the H200
# differs in memory (141 GB HBM3e, 4.8 TB/s).  FP8 is the Hopper figure; A100
# has no FP8.  Sources: NVIDIA H100 and H200 datasheets, A100 datasheet.
PEAK_FLOPS: dict[str, dict[str, float]] = {
    "H200": {"fp64": 67e12, "fp32": 67e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12, "fp8": 1978.9e12},
    "H100": {"fp64": 67e12, "fp32": 67e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12, "fp8": 1978.9e12},
    "H800": {"fp64": 67e12, "fp32": 67e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12, "fp8": 1978.9e12},
    "A100": {"fp64": 19.5e12, "fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12},
    "L4": {"fp32": 30.3e12, "tf32": 60e12, "bf16": 121e12, "fp16": 121e12, "fp8": 242.5e12},
}


def peak_flops(dtype: str = "bf16", name: Optional[str] = None) -> Optional[float]:
    """Datasheet peak FLOP/s of the device for ``dtype``, or ``None`` when unknown.

    ``name`` defaults to the current device's name; matching is by substring
    (``"NVIDIA H200"`` matches ``"H200"``).  CPUs have no entry: measure them
    instead (``gputrain.speed``).
    """
    name = name if name is not None else device_name()
    for key, table in PEAK_FLOPS.items():
        if key.lower() in name.lower():
            return table.get(dtype)
    return None


def synchronize(dev: Optional[torch.device] = None) -> None:
    """Wait for queued GPU work (a no-op on the CPU)."""
    dev = dev or device()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


@dataclass
class Timer:
    """Wall time of a block, correct on GPUs (CUDA events) and CPUs (perf_counter).

    >>> with Timer() as t:
    ...     work()
    >>> t.seconds
    """

    dev: Optional[torch.device] = None
    seconds: float = 0.0

    def __enter__(self) -> "Timer":
        self.dev = self.dev or device()
        if self.dev.type == "cuda":
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        if self.dev.type == "cuda":
            self._end.record()
            self._end.synchronize()
            self.seconds = self._start.elapsed_time(self._end) / 1e3
        else:
            self.seconds = time.perf_counter() - self._t0


def median_seconds(
    fn: Callable[[], object],
    repeats: int = 5,
    warmup: int = 1,
    dev: Optional[torch.device] = None,
    min_seconds: float = 0.0,
) -> float:
    """Median wall time of one call of ``fn()``, correct on GPUs (queued work is waited for).

    ``warmup`` untimed calls first, then ``repeats`` timed samples.  A call too
    short for the clock can be repeated inside each sample until the sample lasts
    about ``min_seconds``; the sample is then divided by its number of calls.
    """
    dev = dev or device()
    for _ in range(warmup):
        fn()
    synchronize(dev)
    inner = 1
    if min_seconds > 0:
        with Timer(dev) as t:
            fn()
        inner = max(1, int(min_seconds / max(t.seconds, 1e-9)))
    times = []
    for _ in range(repeats):
        with Timer(dev) as t:
            for _ in range(inner):
                fn()
        times.append(t.seconds / inner)
    return statistics.median(times)


def package_version() -> str:
    """gputrain's installed version (from the package metadata, so nothing imports upward)."""
    try:
        return version("gputrain")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def info() -> dict[str, object]:
    """Versions, device, preset and known peak FLOP/s, as printed by ``gputrain info``."""
    dev = device()
    out: dict[str, object] = {
        "gputrain": package_version(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "accelerate": accelerate.__version__,
        "device": str(dev),
        "device_name": device_name(dev),
        "cuda": torch.version.cuda or "none",
        "threads": torch.get_num_threads(),
        "preset": preset(),
    }
    for dtype in ("fp32", "tf32", "bf16", "fp8"):
        peak = peak_flops(dtype)
        out[f"peak_{dtype}_tflops"] = None if peak is None else round(peak / 1e12, 1)
    return out


def info_line() -> str:
    """One line for the top of every chapter: where this run happens."""
    i = info()
    return (
        f"preset={i['preset']}  device={i['device']} ({i['device_name']})  "
        f"torch={i['torch']}  accelerate={i['accelerate']}  threads={i['threads']}"
    )

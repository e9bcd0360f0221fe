"""Device and preset choice, the GPU table (peaks, memories, links), and timers.

One code path runs everywhere: :func:`preset` says ``"cpu"`` on a machine
without CUDA and ``"gpu"`` with it, and every chapter picks its sizes from it
with :func:`pick`.  The environment variable ``GPUTRAIN_PRESET`` overrides the
choice (for example to run the small sizes on a GPU).  Explained in the
introduction, "How to run this book".

:data:`GPU_SPECS` is the one table of published GPU figures, each with its
source: SMs, registers, shared memory, L2, HBM, clocks, NVLink and the dense
peak of every format (chapter 11, "The memory hierarchy");
:data:`PEAK_FLOPS` and :func:`peak_flops` read its peaks (chapters 2, 7, 10)."""

from __future__ import annotations

import functools
import os
import platform
import statistics
import time
from dataclasses import dataclass, field, replace
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
    return cpu_name()


@functools.lru_cache(maxsize=1)
def cpu_name() -> str:
    """The CPU's model, as the operating system names it (``platform.processor()`` says only "x86_64" on Linux)."""
    try:
        if platform.system() == "Linux":
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith("model name"):
                        return line.split(":", 1)[1].strip()
        elif platform.system() == "Darwin":
            import subprocess

            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"  # Windows names its CPU here; ARM Linux has no model


KiB = 1024  # NVIDIA's architecture documents mean binary kilobytes: "228 KB" of shared memory is 228 x 1024 bytes
MiB = 1024 * KiB
GiB = 1024 * MiB  # and HBM's "80 GB" is 80 GiB: five stacks of 16 GiB


@dataclass(frozen=True)
class GPUSpec:
    """Published figures of one data-center GPU, each with its source (chapter 11, "The memory hierarchy").

    ``peaks`` holds dense (no sparsity) FLOP/s per format; ``fp64`` is the
    FP64 Tensor Core rate.  Capacities are bytes, and NVIDIA's units are
    binary throughout: 228 KB of shared memory is 228 KiB and an "80 GB" HBM
    is 80 GiB (five 16 GiB stacks).  Bandwidths are bytes/s, NVLink counting
    both directions.  ``None`` means no source we cite gives the figure and
    nothing can be derived from one; the table never fills a gap by guessing.
    ``sources`` maps every field that has a value to the BibTeX keys of
    ``book/references.bib`` it comes from, and ``notes`` says why wherever
    that needs a sentence.  ``inferred`` lists the figures that no source
    gives for this card and that are carried over from the H100 SXM5, whose
    sources they cite; a page that shows one says "inferred from the H100".
    """

    name: str  # the table's key, also accepted as a device name: "H100" is the H100 SXM5
    model: str  # the exact product: "H100 SXM5 80 GB"
    peaks: dict[str, float]  # dense peak FLOP/s per format: fp64, fp32, tf32, bf16, fp16, fp8
    sources: dict[str, tuple[str, ...]]  # field -> BibTeX keys
    notes: dict[str, str] = field(default_factory=dict)  # field -> why a figure is what it is
    inferred: tuple[str, ...] = ()  # fields no source gives for this card: the H100 SXM5's figure
    aliases: tuple[str, ...] = ()  # torch.cuda.get_device_name() strings of this exact card
    sms: Optional[int] = None  # streaming multiprocessors
    warp_size: Optional[int] = None  # threads that execute one instruction together
    max_warps_per_sm: Optional[int] = None  # resident warps an SM can hold at once
    tensor_cores_per_sm: Optional[int] = None
    registers_per_sm: Optional[int] = None  # bytes of register file per SM
    l1_shared_per_sm: Optional[int] = None  # bytes of combined L1 data cache and shared memory per SM
    shared_per_sm: Optional[int] = None  # bytes: the largest shared-memory carve-out of that
    shared_bytes_per_clock: Optional[int] = None  # per SM: 32 banks x 4 bytes (derived from the bank rules)
    l2_bytes: Optional[int] = None
    l2_bytes_per_clock: Optional[int] = None  # L2 read bandwidth per clock, whole chip
    hbm_bytes: Optional[float] = None
    hbm_bandwidth: Optional[float] = None  # bytes/s
    boost_clock_hz: Optional[float] = None  # the highest boost clock (the FP32 and FP64 peaks use it)
    tensor_clock_hz: Optional[float] = None  # the clock the 16- and 8-bit tensor peaks are quoted at
    nvlink_bandwidth: Optional[float] = None  # bytes/s, both directions together

    def figure(self, name: str):
        """One field by name, or the dense peak of a format (``"bf16"``)."""
        return self.peaks.get(name) if name in PEAK_FORMATS else getattr(self, name)

    @property
    def shared_bandwidth(self) -> Optional[float]:
        """Aggregate shared-memory (SRAM) bandwidth, bytes/s: bytes per clock per SM x SMs x boost clock."""
        if None in (self.shared_bytes_per_clock, self.sms, self.boost_clock_hz):
            return None
        return self.shared_bytes_per_clock * self.sms * self.boost_clock_hz

    @property
    def shared_to_hbm(self) -> Optional[float]:
        """How many times HBM's bandwidth the shared memory of all SMs delivers."""
        sram = self.shared_bandwidth
        return None if sram is None or not self.hbm_bandwidth else sram / self.hbm_bandwidth

    @property
    def l2_bandwidth(self) -> Optional[float]:
        """L2 read bandwidth, bytes/s, where NVIDIA publishes bytes per clock (the A100); else ``None``."""
        if self.l2_bytes_per_clock is None or self.boost_clock_hz is None:
            return None
        return self.l2_bytes_per_clock * self.boost_clock_hz

    def ridge(self, dtype: str = "bf16") -> Optional[float]:
        """FLOPs per byte of HBM traffic at which ``dtype`` products stop being memory-bound."""
        peak = self.peaks.get(dtype)
        return None if peak is None or not self.hbm_bandwidth else peak / self.hbm_bandwidth


PEAK_FORMATS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")

# The Hopper figures the whitepaper gives for the H100 SXM5 (clocks, SMs, caches).  The H200
# datasheet lists the H100 SXM's compute peaks but not its SMs, clocks or L2, and DeepSeek
# names what the H800 lost (NVLink, 900 to 400 GB/s, and FP64; zhao2025, section 4.1) and
# counts its 132 SMs (deepseek2024) without giving its HBM, clocks or L2: those figures are
# the H100's, marked ``inferred`` in each card's entry.
_HOPPER_SM = dict(
    sms=132,
    warp_size=32,
    max_warps_per_sm=64,
    tensor_cores_per_sm=4,
    registers_per_sm=256 * KiB,
    l1_shared_per_sm=256 * KiB,
    shared_per_sm=228 * KiB,
    shared_bytes_per_clock=32 * 4,
    l2_bytes=50 * MiB,
    boost_clock_hz=1.98e9,
    tensor_clock_hz=1.83e9,
)
_HOPPER_PEAKS = {
    "fp64": 66.9e12,
    "fp32": 66.9e12,
    "tf32": 494.7e12,
    "bf16": 989.4e12,
    "fp16": 989.4e12,
    "fp8": 1978.9e12,
}
_CUDA_RULES = ("warp_size", "max_warps_per_sm", "registers_per_sm", "shared_bytes_per_clock")  # per compute capability
_SHARED_NOTE = "derived: 32 banks of 4 bytes per clock (the CUDA guide's bank rules), not a published bandwidth"


def _sources(default: tuple[str, ...], **by_field: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Every SM-level field from ``default``, the CUDA guide's per-architecture rules, and overrides."""
    keys = [f for f in _HOPPER_SM if f not in _CUDA_RULES] + ["peaks"]
    return {**{f: default for f in keys}, **{f: ("nvidia2024cuda",) for f in _CUDA_RULES}, **by_field}


_H100 = GPUSpec(
    name="H100",
    model="H100 SXM5 80 GB",
    aliases=("NVIDIA H100 80GB HBM3", "H100 SXM5", "H100 SXM5 80GB", "H100 SXM"),
    peaks=dict(_HOPPER_PEAKS),
    hbm_bytes=80 * GiB,
    hbm_bandwidth=3.35e12,
    nvlink_bandwidth=900e9,
    **_HOPPER_SM,
    sources=_sources(
        ("nvidia2022hopperwp",),
        l1_shared_per_sm=("nvidia2022hopper",),
        shared_per_sm=("nvidia2022hopper",),
        hbm_bytes=("nvidia2022h100",),
        hbm_bandwidth=("nvidia2022h100",),
        nvlink_bandwidth=("nvidia2022h100",),
    ),
    notes={
        "tensor_clock_hz": "the whitepaper quotes tensor peaks at 1.83 GHz, FP32 and FP64 at 1.98 GHz",
        "shared_bytes_per_clock": _SHARED_NOTE,
    },
)
_A100 = GPUSpec(
    name="A100",
    model="A100 SXM4 80 GB",
    aliases=("NVIDIA A100-SXM4-80GB", "A100-SXM-80GB", "A100 SXM4 80GB"),
    peaks={"fp64": 19.5e12, "fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12},
    sms=108,
    warp_size=32,
    max_warps_per_sm=64,
    tensor_cores_per_sm=4,
    registers_per_sm=256 * KiB,
    l1_shared_per_sm=192 * KiB,
    shared_per_sm=164 * KiB,
    shared_bytes_per_clock=32 * 4,
    l2_bytes=40 * MiB,
    l2_bytes_per_clock=5120,
    hbm_bytes=80 * GiB,
    hbm_bandwidth=2.039e12,
    boost_clock_hz=1.41e9,
    tensor_clock_hz=1.41e9,
    nvlink_bandwidth=600e9,
    sources={
        **_sources(("nvidia2020a100",)),
        "l2_bytes_per_clock": ("nvidia2020a100",),
        "peaks": ("nvidia2021a100",),
        "hbm_bytes": ("nvidia2021a100",),
        "hbm_bandwidth": ("nvidia2021a100",),
        "nvlink_bandwidth": ("nvidia2021a100",),
    },
    notes={
        "l2_bytes_per_clock": "the only GPU here whose L2 bandwidth NVIDIA publishes (5120 bytes/clock); "
        "in bytes/s it is derived, at the 1.41 GHz boost clock",
        "shared_bytes_per_clock": _SHARED_NOTE,
    },
)
# The PCIe H100: the whitepaper's 114 SMs and the datasheet's peaks and HBM.  Neither gives its
# boost clock, so it is derived from the FP32 peak: 51 TFLOP/s / (114 SMs x 128 lanes x 2 FLOPs).
_H100_PCIE = replace(
    _H100,
    name="H100 PCIe",
    model="H100 PCIe 80 GB",
    aliases=("NVIDIA H100 PCIe",),
    peaks={"fp64": 51e12, "fp32": 51e12, "tf32": 378e12, "bf16": 756e12, "fp16": 756e12, "fp8": 1513e12},
    sms=114,
    hbm_bandwidth=2.0e12,
    nvlink_bandwidth=600e9,
    boost_clock_hz=51e12 / (114 * 128 * 2),
    tensor_clock_hz=None,
    sources={
        **{f: keys for f, keys in _H100.sources.items() if f != "tensor_clock_hz"},
        "peaks": ("nvidia2022h100",),
        "boost_clock_hz": ("nvidia2022h100", "nvidia2022hopperwp"),
    },
    notes={
        "boost_clock_hz": "derived from the datasheet's FP32 peak: 51 TFLOP/s / (114 SMs x 128 FP32 lanes x 2 FLOPs)",
        "shared_bytes_per_clock": _SHARED_NOTE,
    },
)

GPU_SPECS: dict[str, GPUSpec] = {
    spec.name: spec
    for spec in (
        GPUSpec(
            name="H200",
            model="H200 SXM 141 GB",
            aliases=("NVIDIA H200", "H200 SXM", "H200 SXM 141GB"),
            peaks=dict(_HOPPER_PEAKS),
            hbm_bytes=141 * GiB,
            hbm_bandwidth=4.8e12,
            nvlink_bandwidth=900e9,
            **_HOPPER_SM,
            sources=_sources(
                ("nvidia2024h200", "nvidia2022hopperwp"),
                l1_shared_per_sm=("nvidia2022hopper",),
                shared_per_sm=("nvidia2022hopper",),
                hbm_bytes=("nvidia2024h200",),
                hbm_bandwidth=("nvidia2024h200",),
                nvlink_bandwidth=("nvidia2024h200",),
            ),
            notes={
                "peaks": "the H200 datasheet lists the H100 SXM5's compute peaks",
                "sms": "inferred from the H100: the datasheet gives the H100's peaks but not the SMs behind them",
                "shared_bytes_per_clock": _SHARED_NOTE,
            },
            inferred=("sms", "boost_clock_hz", "tensor_clock_hz", "l2_bytes"),
        ),
        _H100,
        _H100_PCIE,
        GPUSpec(
            name="H100 NVL",
            model="H100 NVL 94 GB",
            aliases=("NVIDIA H100 NVL",),
            peaks={
                "fp64": 60e12,
                "fp32": 60e12,
                "tf32": 417.5e12,
                "bf16": 835.5e12,
                "fp16": 835.5e12,
                "fp8": 1670.5e12,
            },
            hbm_bytes=94 * GiB,
            hbm_bandwidth=3.9e12,
            nvlink_bandwidth=600e9,
            sources={f: ("nvidia2022h100",) for f in ("peaks", "hbm_bytes", "hbm_bandwidth", "nvlink_bandwidth")},
            notes={"peaks": "no source we cite gives the NVL's SMs, clocks or caches, so the table holds none"},
        ),
        GPUSpec(
            name="H800",
            model="H800 SXM5 80 GB",
            aliases=("NVIDIA H800", "H800 SXM5", "H800 80GB HBM3"),
            peaks={k: v for k, v in _HOPPER_PEAKS.items() if k != "fp64"},
            hbm_bytes=80 * GiB,
            hbm_bandwidth=3.35e12,
            nvlink_bandwidth=400e9,
            **_HOPPER_SM,
            sources=_sources(
                ("nvidia2022hopperwp", "zhao2025"),
                sms=("deepseek2024",),
                l1_shared_per_sm=("nvidia2022hopper", "zhao2025"),
                shared_per_sm=("nvidia2022hopper", "zhao2025"),
                hbm_bytes=("nvidia2022h100",),
                hbm_bandwidth=("nvidia2022h100",),
                nvlink_bandwidth=("zhao2025",),
            ),
            notes={
                "peaks": "FP64 is reduced on the H800 (zhao2025) and no figure for it is cited, so it is absent",
                "nvlink_bandwidth": "reduced from the H100's 900 GB/s (zhao2025, section 4.1)",
                "sms": "DeepSeek-V3 gives 20 of the H800's 132 SMs to communication (deepseek2024)",
                "shared_bytes_per_clock": _SHARED_NOTE,
            },
            inferred=("hbm_bytes", "hbm_bandwidth", "boost_clock_hz", "tensor_clock_hz", "l2_bytes"),
        ),
        _A100,
        # The other A100s differ from the SXM4 80 GB only in HBM (nvidia2021a100's other columns).
        *(
            replace(_A100, name=key, model=model, aliases=names, hbm_bytes=gib * GiB, hbm_bandwidth=bandwidth)
            for key, model, names, gib, bandwidth in (
                ("A100 40GB", "A100 SXM4 40 GB", ("NVIDIA A100-SXM4-40GB", "A100-SXM-40GB"), 40, 1.555e12),
                ("A100 PCIe 40GB", "A100 PCIe 40 GB", ("NVIDIA A100-PCIE-40GB",), 40, 1.555e12),
                ("A100 PCIe 80GB", "A100 PCIe 80 GB", ("NVIDIA A100 80GB PCIe", "A100-PCIE-80GB"), 80, 1.935e12),
            )
        ),
        GPUSpec(
            name="L4",
            model="L4 24 GB",
            aliases=("NVIDIA L4",),
            peaks={"fp32": 30.3e12, "tf32": 60e12, "bf16": 121e12, "fp16": 121e12, "fp8": 242.5e12},
            sources={"peaks": ("nvidia2023l4",)},
        ),
    )
}

# Dense peak FLOP/s per format, per GPU: the peaks column of GPU_SPECS, kept as the plain
# table chapters 2, 7 and 10 and the appendix "Making it fast" read.
PEAK_FLOPS: dict[str, dict[str, float]] = {name: dict(spec.peaks) for name, spec in GPU_SPECS.items()}


def _normal(name: str) -> str:
    """A device name compared loosely: case, dashes and a leading "NVIDIA" do not matter."""
    words = name.lower().replace("-", " ").replace("_", " ").split()
    return " ".join(words[1:] if words[:1] == ["nvidia"] else words)


_BY_NAME: dict[str, str] = {
    _normal(alias): spec.name for spec in GPU_SPECS.values() for alias in (spec.name, spec.model, *spec.aliases)
}


def gpu_spec(name: Optional[str] = None) -> Optional[GPUSpec]:
    """The :class:`GPUSpec` of the card called ``name`` (default: this device), or ``None`` if unknown.

    ``name`` is what ``torch.cuda.get_device_name()`` says ("NVIDIA H100 80GB HBM3",
    "NVIDIA A100-SXM4-40GB") or a key of :data:`GPU_SPECS` ("H100" is the SXM5).  The
    whole name must be one the table knows: a variant it does not hold ("NVIDIA H800
    PCIe", "NVIDIA GH200 480GB", a MIG slice) gets ``None``, never a sibling's figures,
    and :func:`unknown_gpu` says why in one line.
    """
    name = name if name is not None else device_name()
    key = _BY_NAME.get(_normal(name))
    return None if key is None else GPU_SPECS[key]


def unknown_gpu(name: str) -> str:
    """One line for a GPU :func:`gpu_spec` does not know: why no datasheet figure is used."""
    first = _normal(name).split()[:1]
    family = [k for k in GPU_SPECS if k.split()[0].lower() in first]
    variants = f" (it knows {', '.join(family)})" if family else ""
    return (
        f"{name!r} is not in gputrain.device.GPU_SPECS{variants}: its datasheet figures are unknown, "
        "so peaks and MFU are measured, not read; add the card with its datasheet to use them"
    )


@dataclass(frozen=True)
class MemoryLevel:
    """One level of a GPU's memory hierarchy, with where its figures come from (chapter 11)."""

    level: str  # "registers", "shared memory", "L2", "HBM"
    capacity: float  # bytes on the whole chip
    per_sm: Optional[int]  # bytes per SM, for the levels each SM has its own of
    bandwidth: Optional[float]  # bytes/s for the whole chip; None where no source gives one
    sources: tuple[str, ...]  # BibTeX keys


def memory_hierarchy(name: str) -> list[MemoryLevel]:
    """Registers -> shared memory -> L2 -> HBM of one GPU, nearest the arithmetic first (chapter 11).

    The order is the path data takes to the arithmetic units, not size: on
    Hopper and Ampere an SM's register file (256 KiB) is larger than its
    shared memory (at most 228 or 164 KiB); from shared memory on, each level
    is larger and further away.

    Shared-memory bandwidth is :attr:`GPUSpec.shared_bandwidth`; the register
    file has no published bandwidth, nor has Hopper's L2 (the A100's has),
    so those stay ``None``.  One clear error for a GPU the table holds no
    memory figures for.
    """
    spec = gpu_spec(name)
    if spec is None or spec.sms is None:
        known = ", ".join(k for k, s in GPU_SPECS.items() if s.sms)
        raise ValueError(f"no memory figures for {name!r} in gputrain.device.GPU_SPECS; use one of: {known}")
    src = spec.sources

    def keys(*fields: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(k for f in fields for k in src.get(f, ())))

    return [
        MemoryLevel(
            "registers", spec.registers_per_sm * spec.sms, spec.registers_per_sm, None, keys("registers_per_sm", "sms")
        ),
        MemoryLevel(
            "shared memory",
            spec.shared_per_sm * spec.sms,
            spec.shared_per_sm,
            spec.shared_bandwidth,
            keys("shared_per_sm", "shared_bytes_per_clock", "sms", "boost_clock_hz"),
        ),
        MemoryLevel("L2", spec.l2_bytes, None, spec.l2_bandwidth, keys("l2_bytes", "l2_bytes_per_clock")),
        MemoryLevel("HBM", spec.hbm_bytes, None, spec.hbm_bandwidth, keys("hbm_bytes", "hbm_bandwidth")),
    ]


def peak_flops(dtype: str = "bf16", name: Optional[str] = None) -> Optional[float]:
    """Datasheet peak FLOP/s of the device for ``dtype``, or ``None`` when unknown.

    ``name`` defaults to the current device's name and is matched as
    :func:`gpu_spec` does: the exact card, or ``None`` for a variant the table
    does not hold.  CPUs have no entry: measure them instead (``gputrain.speed``).
    """
    name = name if name is not None else device_name()
    spec = gpu_spec(name)
    return None if spec is None else spec.peaks.get(dtype)


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
    if dev.type == "cuda":
        spec = gpu_spec(device_name(dev))
        out["gpu_table"] = spec.model if spec else unknown_gpu(device_name(dev))
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

"""The GPU table: :data:`GPU_SPECS`, each card's figures with their sources, and :data:`PEAK_FLOPS`, its peaks."""

from __future__ import annotations

from dataclasses import replace

from .spec import GiB, GPUSpec, KiB, MiB

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

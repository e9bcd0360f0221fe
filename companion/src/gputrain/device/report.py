"""What ``gputrain info`` prints and every chapter's first line: versions, device, preset, known peaks."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version

import accelerate
import torch

from .choice import device, device_name, preset
from .lookup import gpu_spec, peak_flops, unknown_gpu


def package_version() -> str:
    """gputrain's installed version (from the package metadata, so nothing imports upward)."""
    try:
        return version("gputrain")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def info() -> dict[str, object]:
    """Versions, device, preset and known peak FLOP/s, as printed by ``gputrain info``."""
    dev = device()
    name = device_name(dev)
    out: dict[str, object] = {
        "gputrain": package_version(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "accelerate": accelerate.__version__,
        "device": str(dev),
        "device_name": name,
        "cuda": torch.version.cuda or "none",
        "threads": torch.get_num_threads(),
        "preset": preset(),
    }
    if dev.type == "cuda":
        spec = gpu_spec(name)
        out["gpu_table"] = spec.model if spec else unknown_gpu(name)
    for dtype in ("fp32", "tf32", "bf16", "fp8"):
        peak = peak_flops(dtype, name)
        out[f"peak_{dtype}_tflops"] = None if peak is None else round(peak / 1e12, 1)
    return out


def info_line() -> str:
    """One line for the top of every chapter: where this run happens."""
    i = info()
    return (
        f"preset={i['preset']}  device={i['device']} ({i['device_name']})  "
        f"torch={i['torch']}  accelerate={i['accelerate']}  threads={i['threads']}"
    )

"""Which preset and which device: one code path from a laptop's CPU to a GPU (the introduction, "How to run this book").

:func:`preset` says ``"cpu"`` on a machine without CUDA and ``"gpu"`` with it,
``GPUTRAIN_PRESET`` overrides it, and :func:`pick` chooses a chapter's sizes
from it.  :func:`device` and :func:`device_name` say where the code runs.
"""

from __future__ import annotations

import functools
import os
import platform
from typing import Optional, TypeVar

import torch

PRESETS = ("cpu", "gpu")
ENV_PRESET = "GPUTRAIN_PRESET"

_T = TypeVar("_T")


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


def pick(cpu: _T, gpu: _T, preset_name: Optional[str] = None) -> _T:
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

"""Finding a card in the GPU table by the name the driver gives it: the exact variant, or nothing.

:func:`gpu_spec` matches the whole name loosely (case, dashes, a leading
"NVIDIA"), so a variant the table does not hold never borrows a sibling's
figures; :func:`unknown_gpu` says so in one line, and :func:`peak_flops`
reads a peak through the same match.
"""

from __future__ import annotations

from typing import Optional

from .choice import device_name
from .spec import GPUSpec
from .table import GPU_SPECS


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


def peak_flops(dtype: str = "bf16", name: Optional[str] = None) -> Optional[float]:
    """Datasheet peak FLOP/s of the device for ``dtype``, or ``None`` when unknown.

    ``name`` defaults to the current device's name and is matched as
    :func:`gpu_spec` does: the exact card, or ``None`` for a variant the table
    does not hold.  CPUs have no entry: measure them instead (``gputrain.speed``).
    """
    name = name if name is not None else device_name()
    spec = gpu_spec(name)
    return None if spec is None else spec.peaks.get(dtype)

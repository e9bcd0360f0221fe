"""Device and preset choice, the GPU table (peaks, memories, links), and timers.

One code path runs everywhere: :func:`preset` says ``"cpu"`` on a machine
without CUDA and ``"gpu"`` with it, and every chapter picks its sizes from it
with :func:`pick`.  The environment variable ``GPUTRAIN_PRESET`` overrides the
choice (for example to run the small sizes on a GPU).  Explained in the
introduction, "How to run this book".

:data:`GPU_SPECS` is the one table of published GPU figures, each with its
source: SMs, registers, shared memory, L2, HBM, clocks, NVLink and the dense
peak of every format (chapter 11, "The memory hierarchy");
:data:`PEAK_FLOPS` and :func:`peak_flops` read its peaks (chapters 2, 7, 10).

One mechanism per module, each importing only those above it
(``spec`` and ``choice`` import nothing of the package)::

    choice      preset, pick, device, device_name, cpu_name
    spec        GPUSpec and the units of its capacities (KiB, MiB, GiB)
    table       GPU_SPECS, PEAK_FLOPS                    <- spec
    lookup      gpu_spec, unknown_gpu, peak_flops        <- choice, spec, table
    hierarchy   MemoryLevel, memory_hierarchy            <- table, lookup
    timing      synchronize, Timer, median_seconds       <- choice
    report      info, info_line, package_version         <- choice, lookup

* :mod:`~gputrain.device.choice`: the preset and the device the code runs on.
* :mod:`~gputrain.device.spec`: :class:`GPUSpec`, one card's published figures.
* :mod:`~gputrain.device.table`: :data:`GPU_SPECS`, every card the book
  discusses with the sources of each figure, and :data:`PEAK_FLOPS`.
* :mod:`~gputrain.device.lookup`: :func:`gpu_spec`, a card found by the name
  the driver gives it, never a sibling variant's figures.
* :mod:`~gputrain.device.hierarchy`: :func:`memory_hierarchy`, registers to HBM.
* :mod:`~gputrain.device.timing`: :class:`Timer` and :func:`median_seconds`,
  correct on a GPU, whose work is queued.
* :mod:`~gputrain.device.report`: :func:`info`, what ``gputrain info`` prints.

Every name is importable from ``gputrain.device`` itself, as the chapters do.
"""

from .choice import ENV_PRESET, PRESETS, PresetError, check_preset, cpu_name, device, device_name, pick, preset
from .hierarchy import MemoryLevel, memory_hierarchy
from .lookup import gpu_spec, peak_flops, unknown_gpu
from .report import info, info_line, package_version
from .spec import PEAK_FORMATS, GiB, GPUSpec, KiB, MiB
from .table import GPU_SPECS, PEAK_FLOPS
from .timing import Timer, median_seconds, synchronize

__all__ = [
    "ENV_PRESET",
    "GPU_SPECS",
    "PEAK_FLOPS",
    "PEAK_FORMATS",
    "PRESETS",
    "GPUSpec",
    "GiB",
    "KiB",
    "MemoryLevel",
    "MiB",
    "PresetError",
    "Timer",
    "check_preset",
    "cpu_name",
    "device",
    "device_name",
    "gpu_spec",
    "info",
    "info_line",
    "memory_hierarchy",
    "median_seconds",
    "package_version",
    "peak_flops",
    "pick",
    "preset",
    "synchronize",
    "unknown_gpu",
]

"""Many processes, one model (chapter 8): launching, ring all-reduce, tensor and pipeline parallelism.

Everything here runs for real on several processes: gloo on a CPU, NCCL on
GPUs, the same code.  Per-rank functions live in these modules (not in
notebook cells) so :func:`launch` can send them to fresh processes.
"""

from __future__ import annotations

from .launch import LaunchError, Results, default_backend, format_outputs, launch, rank_device
from .ring import (
    Traffic,
    chunk_bounds,
    parameter_server_all_reduce,
    parameter_server_traffic_bytes,
    ring_all_reduce,
    ring_all_reduce_time,
    ring_traffic_bytes,
)

__all__ = [
    "LaunchError",
    "Results",
    "Traffic",
    "chunk_bounds",
    "default_backend",
    "format_outputs",
    "launch",
    "parameter_server_all_reduce",
    "parameter_server_traffic_bytes",
    "rank_device",
    "ring_all_reduce",
    "ring_all_reduce_time",
    "ring_traffic_bytes",
]

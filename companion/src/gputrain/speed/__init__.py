"""Measuring speed (chapter 2, appendix "Making it fast"): matmul probes, bandwidth, throughput, backends.

* **measured** speed: :func:`gputrain.device.median_seconds`, :func:`matmul_tflops`
  (against the datasheet peak from :func:`gputrain.device.peak_flops` on a
  GPU) and :func:`copy_bandwidth`, the two roofs of a roofline plot;
  :func:`time_shares` says where the time of a function goes, by operator;
* **peaks and throughput**: :func:`measured_peak`, :func:`peak_for_mfu` and
  :class:`ThroughputMeter` (tokens per second) feed :func:`gputrain.flops.mfu`;
  :func:`count_ops` counts kernel launches and bytes moved;
  :func:`process_cost` measures a whole program: wall and CPU time, peak memory;
* **backend switches**: :func:`cpu_threads`, :func:`fp32_matmul` (TF32) and
  :func:`keep_freed_memory` (the C allocator's reuse of a step's buffers).

One mechanism per module, each importing only those above it (and
:mod:`gputrain.device`, below the whole package)::

    switches     cpu_threads, fp32_matmul, keep_freed_memory
    process      process_cost (no torch: a program measured from outside)
    profiling    time_shares, count_ops, OpCount
    probes       matmul_tflops, matmul_sweep, copy_bandwidth   <- switches
    bf16         native_bf16, forced_verdict, Bf16Support      <- switches
    throughput   measured_peak, peak_for_mfu, ThroughputMeter  <- probes

* :mod:`~gputrain.speed.switches`: the backend switches a measurement sets.
* :mod:`~gputrain.speed.process`: :func:`process_cost`, a whole program's
  wall time, CPU time and peak memory.
* :mod:`~gputrain.speed.profiling`: :func:`time_shares` and :func:`count_ops`,
  where a function's time and memory traffic go, operator by operator.
* :mod:`~gputrain.speed.probes`: :func:`matmul_tflops` and
  :func:`copy_bandwidth`, the compute and memory roofs measured.
* :mod:`~gputrain.speed.bf16`: :func:`native_bf16`, whether bf16 products
  are native here, measured once per process.
* :mod:`~gputrain.speed.throughput`: :func:`peak_for_mfu` and
  :class:`ThroughputMeter`, the two numbers MFU divides.

Every name is importable from ``gputrain.speed`` itself, as the chapters do.
"""

from .bf16 import BF16_ENV, BF16_SLOW_FACTOR, Bf16Support, forced_verdict, native_bf16
from .probes import DTYPES, MatmulProbe, copy_bandwidth, matmul_sweep, matmul_tflops
from .process import process_cost
from .profiling import OpCount, count_ops, time_shares
from .switches import cpu_threads, fp32_matmul, keep_freed_memory
from .throughput import ThroughputMeter, measured_peak, peak_for_mfu, tokens_per_second

__all__ = [
    "BF16_ENV",
    "BF16_SLOW_FACTOR",
    "DTYPES",
    "Bf16Support",
    "MatmulProbe",
    "OpCount",
    "ThroughputMeter",
    "copy_bandwidth",
    "count_ops",
    "cpu_threads",
    "forced_verdict",
    "fp32_matmul",
    "keep_freed_memory",
    "matmul_sweep",
    "matmul_tflops",
    "measured_peak",
    "native_bf16",
    "peak_for_mfu",
    "process_cost",
    "time_shares",
    "tokens_per_second",
]

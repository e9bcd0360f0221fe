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
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import statistics
import sys
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from .device import Timer, device, device_name, median_seconds, peak_flops, synchronize

# --- measured speed -------------------------------------------------------------


@contextlib.contextmanager
def cpu_threads(n: int):
    """Run CPU operators on ``n`` threads inside the block, then restore the setting.

    On a small, shared CPU, operators on tiny tensors spend longer handing work
    between threads than computing; one thread measures the arithmetic.
    """
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


@functools.lru_cache(maxsize=None)
def keep_freed_memory(max_block: int = 32 * 2**20) -> bool:
    """Let glibc's malloc keep freed blocks of up to ``max_block`` bytes for reuse (chapter 6's training loop).

    A training step frees its activations and allocates the same sizes again
    in the next step.  glibc returns every block above its mmap threshold
    (128 KiB until the process frees some larger block) to the kernel at once,
    so the next step faults the same pages in again, zero-filled: hundreds of
    thousands of page faults in a short CPU run.  Fixing the threshold at 32 MiB,
    the most glibc's own adjustment reaches, and the trim threshold at twice
    that keeps a step's buffers in the process.  The price is a little peak
    memory: blocks of mixed sizes (2, 4, 6 and 8 MiB in a small GPT) all come
    from one heap, whose holes fit the next step less than perfectly.  Measured
    on a 2-core EPYC (issue 24's 60-step run; three sets of 2-3 runs): 123
    thousand page faults instead of 1.3-1.5 million, 13-14% less wall time,
    and 4 to 16 MiB more peak RSS (of about 605).
    Done once per process; returns False where the C library is not glibc.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's <malloc.h>
    return bool(mallopt(m_mmap_threshold, max_block)) and bool(mallopt(m_trim_threshold, 2 * max_block))


# Runs the command and reports on it.  A small process of its own does the waiting because Linux counts into
# a child's peak RSS the memory of the process it was forked from: started from a notebook's kernel or a
# script that has imported torch, every child would seem to need at least that much.
_MEASURER = """
import os, subprocess, sys, time
t0 = time.perf_counter()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
print(time.perf_counter() - t0, os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime, usage.ru_maxrss)
"""


def process_cost(command: Sequence[str], cwd: Optional[str] = None) -> dict[str, float]:
    """Run ``command`` to its end in a fresh process; its wall and CPU seconds and its peak memory.

    The whole process is measured, imports and exit included, by the kernel's
    own accounting (``os.wait4``): ``wall_s``, ``cpu_s`` (user + system) and
    ``rss_mib``, the peak resident set size.  Its output is discarded; a
    failure raises ``RuntimeError`` with the end of its standard error.
    ``bench/compare.py`` and the appendix "Making it fast" use it.  Linux and
    macOS only: Windows has no ``wait4``.
    """
    import subprocess
    import tempfile

    if not hasattr(os, "wait4"):
        raise OSError("process_cost needs os.wait4, which this platform lacks; run it on Linux or macOS")
    with tempfile.TemporaryFile() as err:
        out = subprocess.run([sys.executable, "-c", _MEASURER, *command], cwd=cwd, stdout=subprocess.PIPE, stderr=err)
        err.seek(0)
        tail = err.read().decode(errors="replace")[-1500:]
    fields, name = out.stdout.split(), " ".join(map(str, command))
    if out.returncode or len(fields) != 4:  # the measurer itself failed: the command could not start
        raise RuntimeError(f"{name} did not run:\n{tail}")
    wall, code, cpu, peak = float(fields[0]), int(fields[1]), float(fields[2]), int(fields[3])
    if code:
        raise RuntimeError(f"{name} exited {code}:\n{tail}")
    per_unit = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return {"wall_s": wall, "cpu_s": cpu, "rss_mib": peak * per_unit / 2**20}


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 (C++ logging bypasses ``sys.stderr``) inside the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(devnull)
        os.close(saved)


def time_shares(fn: Callable, *args, rounds: int = 3, **kwargs) -> dict[str, float]:
    """Fraction of run time per operator over ``rounds`` calls, measured with ``torch.profiler``.

    Self time of each ``aten`` operator: GPU kernel time when CUDA is
    available, CPU time otherwise.  Keys match :attr:`FlopCount.by_op`
    ("aten.addmm"), so time shares and FLOP shares can be set side by side.
    """
    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    fn(*args, **kwargs)  # warm-up: first calls allocate and pick kernels
    synchronize()
    prof = profile(activities=activities)
    with _quiet_stderr():  # torch 2.13's profiler prints a trace line at start and stop
        prof.start()
    try:
        for _ in range(rounds):
            fn(*args, **kwargs)
        synchronize()
    finally:
        with _quiet_stderr():
            prof.stop()
    attr = "self_device_time_total" if cuda else "self_cpu_time_total"
    times = {e.key.replace("::", "."): getattr(e, attr) for e in prof.key_averages() if e.key.startswith("aten::")}
    times = {k: v for k, v in times.items() if v > 0}
    total = sum(times.values())
    return {k: v / total for k, v in sorted(times.items(), key=lambda kv: -kv[1])}


DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "tf32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


@contextlib.contextmanager
def fp32_matmul(precision: str):
    """Let float32 matrix products use TF32 tensor cores ("tf32") or forbid it ("ieee"), inside the block.

    TF32 keeps float32's range with a 10-bit mantissa (chapter 7); on Ampere and
    newer GPUs it runs float32 products on tensor cores ("Making it fast").
    """
    if precision not in ("tf32", "ieee"):
        raise ValueError(f"precision must be 'tf32' or 'ieee', got {precision!r}")
    knob = torch.backends.cuda.matmul
    name, value = "fp32_precision", precision
    try:
        old = knob.fp32_precision  # torch >= 2.9
    except AttributeError:  # older torch: the boolean switch
        name, value = "allow_tf32", precision == "tf32"
        old = knob.allow_tf32
    setattr(knob, name, value)
    try:
        yield
    finally:
        setattr(knob, name, old)


@dataclass
class MatmulProbe:
    """Throughput of one square matrix product ``(n x n) @ (n x n)``."""

    n: int
    dtype: str
    device: str
    seconds: float  # median time of one product
    tflops: float  # 2 n^3 / seconds / 1e12
    peak_tflops: Optional[float]  # datasheet peak of this device and dtype, None if unknown (CPUs)

    @property
    def fraction_of_peak(self) -> Optional[float]:
        return self.tflops / self.peak_tflops if self.peak_tflops else None

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved if A, B and C cross memory once: 2n^3 / (3 n^2 bytes)."""
        return 2 * self.n / (3 * DTYPES[self.dtype].itemsize)

    def to_dict(self) -> dict:
        """A JSON-ready row (as stored in ``book/results/matmul.json``)."""
        return {
            "n": self.n,
            "dtype": self.dtype,
            "seconds": self.seconds,
            "tflops": self.tflops,
            "peak_tflops": self.peak_tflops,
            "fraction_of_peak": self.fraction_of_peak,
            "intensity_flop_per_byte": self.intensity,
        }


def matmul_tflops(
    n: int, dtype: str = "bf16", dev: Optional[torch.device] = None, target_seconds: float = 0.2
) -> MatmulProbe:
    """Measure TFLOP/s of an n x n x n product in ``dtype`` (fp32, tf32, bf16, fp16) (chapter 2).

    On a GPU the result carries the datasheet peak, so ``fraction_of_peak`` says
    how close the chip came; "tf32" is float32 data on TF32 tensor cores.
    """
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of: {', '.join(DTYPES)}")
    dev = dev or device()
    if dtype == "tf32" and dev.type != "cuda":
        raise ValueError("tf32 is a mode of NVIDIA tensor cores; on the CPU measure 'fp32' instead")
    gen = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn(n, n, device=dev, dtype=DTYPES[dtype], generator=gen)  # (n, n)
    b = torch.randn(n, n, device=dev, dtype=DTYPES[dtype], generator=gen)  # (n, n)
    out = torch.empty(n, n, device=dev, dtype=DTYPES[dtype])  # reused: time the product, not allocation
    context = fp32_matmul("tf32" if dtype == "tf32" else "ieee") if dev.type == "cuda" else contextlib.nullcontext()
    with context:
        seconds = median_seconds(lambda: torch.mm(a, b, out=out), dev=dev, min_seconds=target_seconds / 5)
    peak = peak_flops(dtype) if dev.type == "cuda" else None
    return MatmulProbe(
        n=n,
        dtype=dtype,
        device=str(dev),
        seconds=seconds,
        tflops=2 * n**3 / seconds / 1e12,
        peak_tflops=peak / 1e12 if peak else None,
    )


def matmul_sweep(
    sizes: Sequence[int], dtypes: Sequence[str], dev: Optional[torch.device] = None, target_seconds: float = 0.1
) -> list[MatmulProbe]:
    """:func:`matmul_tflops` for every dtype and size: the data of a throughput-vs-size plot."""
    return [matmul_tflops(n, dt, dev, target_seconds) for dt in dtypes for n in sizes]


def copy_bandwidth(nbytes: int = 1 << 28, dev: Optional[torch.device] = None) -> float:
    """Measured memory bandwidth in bytes/s: a device-to-device copy reads and writes ``nbytes`` each.

    The memory roof of a roofline plot (chapter 2).
    """
    dev = dev or device()
    src = torch.empty(nbytes // 4, device=dev, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    seconds = median_seconds(lambda: dst.copy_(src), dev=dev)
    return 2 * src.numel() * 4 / seconds


@dataclass(frozen=True)
class Bf16Support:
    """Whether this device multiplies bf16 matrices natively, and how much slower than fp32 it is."""

    native: bool
    slowdown: float  # time of a bf16 product / time of the same fp32 product (1.0 on GPUs: not measured)
    reason: str  # one line for logs and warnings

    def __str__(self) -> str:
        return self.reason


BF16_SLOW_FACTOR = 4.0  # a bf16 product this many times slower than fp32 is emulated in software


BF16_ENV = "GPUTRAIN_NATIVE_BF16"  # "0" or "1" overrides the measured verdict (tests, or to see the other path)


def native_bf16(dev_type: Optional[str] = None, n: int = 256) -> Bf16Support:
    """Measure once whether bf16 matrix products are native here (chapter 7, appendix "Making it fast").

    A CUDA GPU reports it (``torch.cuda.is_bf16_supported``).  On a CPU the
    answer is measured, not guessed from CPU flags: an ``n x n`` bf16 product is
    timed against the fp32 one.  CPUs without AVX-512 BF16, AMX or ARM's BF16
    instructions convert every operand in software, measured at 75x slower than
    fp32 on an AVX2-only AMD EPYC; such a CPU reports ``native=False`` and
    chapters emulate bf16 rounding in fp32 (:class:`gputrain.precision.EmulatedBf16`)
    instead of running bf16 products.  The environment variable
    ``GPUTRAIN_NATIVE_BF16=0`` (or ``1``) overrides the verdict; the
    slowdown is still the measured one.
    """
    measured = _measured_bf16(dev_type, n)
    forced = forced_verdict(BF16_ENV, "emulate bf16", "native")
    if forced is None:
        return measured
    verdict = "native" if forced else "emulated in FP32"
    return Bf16Support(forced, measured.slowdown, f"bf16 {verdict}: {BF16_ENV}={int(forced)} ({measured})")


def forced_verdict(env: str, off: str, on: str) -> Optional[bool]:
    """What the environment variable ``env`` forces on a measured fast path: ``"0"`` False, ``"1"`` True, unset None."""
    forced = os.environ.get(env, "")
    if forced not in ("", "0", "1"):
        raise ValueError(f"{env}={forced!r} must be 0 ({off}) or 1 ({on}), or unset to measure")
    return None if forced == "" else forced == "1"


@functools.lru_cache(maxsize=None)
def _measured_bf16(dev_type: Optional[str] = None, n: int = 256) -> Bf16Support:
    kind = dev_type or device().type
    if kind == "cuda":
        ok = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        return Bf16Support(ok, 1.0, f"bf16 {'native' if ok else 'not supported'} on {device_name()}")
    gen = torch.Generator().manual_seed(0)
    a32 = torch.randn(n, n, generator=gen)
    b32 = torch.randn(n, n, generator=gen)
    a16, b16 = a32.bfloat16(), b32.bfloat16()
    with cpu_threads(1):
        t32 = median_seconds(lambda: a32 @ b32, repeats=3, dev=torch.device("cpu"))
        t16 = median_seconds(lambda: a16 @ b16, repeats=3, dev=torch.device("cpu"))
    slowdown = t16 / t32
    native = slowdown < BF16_SLOW_FACTOR
    verdict = "native" if native else "emulated in software"
    return Bf16Support(native, slowdown, f"bf16 matmul {verdict} on this CPU ({slowdown:.1f}x the fp32 time at {n}^2)")


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


@dataclass
class OpCount:
    """Operator calls of one function and the bytes they touch (appendix "Making it fast")."""

    calls: dict[str, int]  # "aten._foreach_mul_" -> calls
    bytes_moved: int  # inputs read + outputs and in-place updates written: memory traffic if nothing stays in cache

    @property
    def total(self) -> int:
        return sum(self.calls.values())


def count_ops(fn: Callable, *args, **kwargs) -> OpCount:
    """Count the ``aten`` operators ``fn(*args, **kwargs)`` runs, and the bytes they read and write.

    In eager PyTorch each operator call is at least one kernel launch on a GPU
    and one pass over its operands in memory, so the count measures launch
    overhead and the bytes measure traffic.  Fusion (a fused optimizer,
    ``torch.compile``) shows up as fewer calls touching fewer bytes.
    """
    calls: dict[str, int] = {}
    moved = [0]

    def nbytes(obj) -> int:
        return sum(t.numel() * t.element_size() for t in tree_leaves(obj) if isinstance(t, torch.Tensor))

    class Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = str(func.overloadpacket).replace("::", ".")
            if not name.startswith("aten."):  # profiler markers and the like launch nothing
                return out
            calls[name] = calls.get(name, 0) + 1
            schema = func._schema
            written = [a for a, arg in zip(args, schema.arguments) if arg.alias_info and arg.alias_info.is_write]
            written += [
                kwargs[arg.name]
                for arg in schema.arguments
                if arg.name in kwargs and arg.alias_info and arg.alias_info.is_write
            ]
            fresh = [
                o for o, ret in zip(out if isinstance(out, tuple) else (out,), schema.returns) if ret.alias_info is None
            ]  # outputs that are not one of the inputs, updated in place
            moved[0] += nbytes((args, kwargs)) + nbytes(written) + nbytes(fresh)  # every input read once
            return out

    with Counter():
        fn(*args, **kwargs)
    return OpCount(calls=dict(sorted(calls.items(), key=lambda kv: -kv[1])), bytes_moved=moved[0])

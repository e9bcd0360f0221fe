"""Counting and measuring compute: FLOPs of a forward pass, per-token rules, matmul throughput.

Chapter 2 explains these.  Three kinds of numbers live here, each in its own
section so later ones (utilization, tokens per second, loss spikes) can be
added below without touching the rest:

* **counted** FLOPs: :func:`count_flops` runs a function under
  ``torch.utils.flop_counter.FlopCounterMode`` and reports FLOPs per operator
  and per module;
* **rule-of-thumb** FLOPs: :func:`forward_flops_per_token` (2N plus the
  attention term) and :func:`train_flops_per_token` (three times that);
* **measured** speed: :func:`gputrain.device.median_seconds`, :func:`matmul_tflops` (against
  the datasheet peak from :func:`gputrain.device.peak_flops` on a GPU) and
  :func:`copy_bandwidth`, the two roofs of a roofline plot;
* **utilization**: :func:`gpt_train_flops_per_token`, :func:`mfu` against a
  datasheet or a measured peak (:func:`peak_for_mfu`), and
  :class:`ThroughputMeter` for tokens per second, :func:`count_ops` for kernel
  launches and bytes moved (appendix "Making it fast").

A FLOP here is one floating-point add or multiply, so a multiply-add counts 2
and an (m x k) @ (k x n) product costs 2mkn.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count
from torch.utils._pytree import tree_leaves

from .device import Timer, device, device_name, median_seconds, peak_flops, synchronize

aten = torch.ops.aten

# --- counted FLOPs -----------------------------------------------------------

# Operators that are matrix products (torch's counter knows these by itself,
# except the CPU attention kernel registered below).
MATMUL_OPS = frozenset({
    "aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten._scaled_mm", "aten.convolution",
    "aten._scaled_dot_product_flash_attention", "aten._scaled_dot_product_efficient_attention",
    "aten._scaled_dot_product_cudnn_attention", "aten._scaled_dot_product_flash_attention_for_cpu",
    "aten._flash_attention_forward", "aten._efficient_attention_forward",
})

# Rough arithmetic per output element of the operators that are not matrix
# products.  torch's counter ignores them (it counts only matmuls and
# convolutions); we add them so the matmul share is measured, not assumed.
# The exact numbers depend on the kernel (an exp is several FLOPs, GELU
# several more); chapter 2 doubles them all and the conclusion stands.
ELEMENTWISE_FLOPS: dict[str, float] = {
    "add": 1, "add_": 1, "sub": 1, "sub_": 1, "mul": 1, "mul_": 1, "div": 1, "div_": 1,
    "neg": 1, "relu": 1, "relu_": 1, "threshold_backward": 1, "where": 1, "masked_fill": 1,
    "exp": 4, "log": 4, "tanh": 6, "sigmoid": 5, "silu": 6, "gelu": 8,
    "native_layer_norm": 8,  # mean, variance, subtract, divide, scale, shift
    "_softmax": 5, "_safe_softmax": 5, "_log_softmax": 5,  # max, subtract, exp, sum, divide
    "native_dropout": 2,
}


def _per_element(cost: float) -> Callable:
    def formula(*args, out_val=None, **kwargs) -> int:
        outs = [t for t in tree_leaves(out_val) if isinstance(t, torch.Tensor)]
        return int(cost * outs[0].numel()) if outs else 0

    formula._get_raw = True  # FlopCounterMode passes the real output, not just shapes
    return formula


def _cpu_attention_flops(q_shape, k_shape, v_shape, *args, out_shape=None, **kwargs) -> int:
    # The fused CPU kernel does the same two products as the GPU kernels torch
    # already counts; like torch, count the full T x T scores even when causal.
    return sdpa_flop_count(q_shape, k_shape, v_shape)


def _cpu_attention_backward_flops(grad_shape, q_shape, k_shape, v_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_backward_flop_count(grad_shape, q_shape, k_shape, v_shape)  # twice the forward


@dataclass
class FlopCount:
    """FLOPs of one call, by operator and by module (chapter 2)."""

    by_op: dict[str, int]  # "aten.addmm" -> FLOPs
    by_module: dict[str, int] = field(default_factory=dict)  # "GPT.blocks.0.attn" -> FLOPs, descendants included

    @property
    def total(self) -> int:
        return sum(self.by_op.values())

    @property
    def matmul(self) -> int:
        """FLOPs spent in matrix products (linear layers, attention products, convolutions)."""
        return sum(n for op, n in self.by_op.items() if op in MATMUL_OPS)

    def matmul_share(self) -> float:
        return matmul_fraction(self.shares())

    def shares(self) -> dict[str, float]:
        """Fraction of all FLOPs per operator, largest first."""
        return {op: n / self.total for op, n in sorted(self.by_op.items(), key=lambda kv: -kv[1])}


def count_flops(fn: Callable, *args, elementwise: bool = True, elementwise_scale: float = 1.0,
                **kwargs) -> FlopCount:
    """FLOPs of ``fn(*args, **kwargs)`` (a model or any function), counted operator by operator.

    With ``elementwise=True`` the non-matmul operators are counted too (costs
    from :data:`ELEMENTWISE_FLOPS` times ``elementwise_scale``) and attention
    runs through PyTorch's reference ("math") path, so its softmax and masking
    show up as separate operators.  With ``elementwise=False`` only matrix
    products are counted, as ``FlopCounterMode`` does, on the default kernels.
    ``fn`` may run a backward pass too (training FLOPs); wrap it in
    ``torch.no_grad()`` yourself to skip building the graph.  Works on the
    ``meta`` device, so a model too large to run can be counted.
    """
    mapping: dict = {aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention_flops,
                     aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_attention_backward_flops}
    context = contextlib.nullcontext()
    if elementwise:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        context = sdpa_kernel(SDPBackend.MATH)
        for name, cost in ELEMENTWISE_FLOPS.items():
            if hasattr(aten, name):
                mapping[getattr(aten, name)] = _per_element(cost * elementwise_scale)
    counter = FlopCounterMode(display=False, custom_mapping=mapping)
    with context, counter:
        fn(*args, **kwargs)
    counts = counter.get_flop_counts()
    by_op = {str(op): n for op, n in counts.get("Global", {}).items() if n}
    by_module = {name: sum(ops.values()) for name, ops in counts.items() if name != "Global"}
    return FlopCount(by_op=by_op, by_module=by_module)


# --- rule-of-thumb FLOPs -------------------------------------------------------


def matmul_params(model: nn.Module) -> int:
    """N in the 2N rule: weights of the model's ``nn.Linear`` layers, shared ones once.

    Every such weight takes part in exactly one multiply-add per token.
    Embedding lookups, biases and LayerNorm gains do not (they cost ~0 FLOPs);
    a tied output head is a Linear, so the tied embedding is counted once.
    """
    seen: set[int] = set()
    n = 0
    for m in model.modules():
        if isinstance(m, nn.Linear) and id(m.weight) not in seen:
            seen.add(id(m.weight))
            n += m.weight.numel()
    return n


def forward_flops_per_token(n_params: int, n_layer: int = 0, seq_len: int = 0, n_embd: int = 0) -> int:
    """Forward FLOPs per token of a transformer: ``2 N + 4 L T C`` (chapter 2).

    ``2N``: each weight is one multiply and one add per token.  ``4 L T C``:
    per layer a token's query meets T keys (``2 T C``) and its T attention
    weights mix T values (``2 T C``).  This counts the full T x T score matrix,
    as PaLM's utilization formula and torch's counter do; a causal kernel that
    skips the masked half does about ``2 L T C``.
    """
    return 2 * n_params + 4 * n_layer * seq_len * n_embd


def train_flops_per_token(n_params: int, n_layer: int = 0, seq_len: int = 0, n_embd: int = 0) -> int:
    """Training FLOPs per token, ``6 N + 12 L T C``: the backward pass costs twice the forward (chapter 4).

    Each weight's backward is two products (gradient of its input and of
    itself), hence 3 x the forward.  Flash-style attention kernels recompute
    the scores in backward, one product more: torch counts ``14 L T C`` there.
    """
    return 3 * forward_flops_per_token(n_params, n_layer, seq_len, n_embd)


def loglog_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of log y against log x: the exponent p in y ~ x^p."""
    lx = torch.tensor([math.log(v) for v in x], dtype=torch.float64)
    ly = torch.tensor([math.log(v) for v in y], dtype=torch.float64)
    lx, ly = lx - lx.mean(), ly - ly.mean()
    return float((lx * ly).sum() / (lx * lx).sum())


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


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 (C++ logging bypasses ``sys.stderr``) inside the block."""
    import os
    import sys

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
    from torch.profiler import ProfilerActivity, profile

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


def matmul_fraction(shares: dict[str, float]) -> float:
    """The part of a share table (FLOPs or time, by operator) that belongs to matrix products."""
    return sum(v for k, v in shares.items() if k in MATMUL_OPS)


DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
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
        return {"n": self.n, "dtype": self.dtype, "seconds": self.seconds, "tflops": self.tflops,
                "peak_tflops": self.peak_tflops, "fraction_of_peak": self.fraction_of_peak,
                "intensity_flop_per_byte": self.intensity}


def matmul_tflops(n: int, dtype: str = "bf16", dev: Optional[torch.device] = None,
                  target_seconds: float = 0.2) -> MatmulProbe:
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
    return MatmulProbe(n=n, dtype=dtype, device=str(dev), seconds=seconds, tflops=2 * n**3 / seconds / 1e12,
                       peak_tflops=peak / 1e12 if peak else None)


def matmul_sweep(sizes: Sequence[int], dtypes: Sequence[str], dev: Optional[torch.device] = None,
                 target_seconds: float = 0.1) -> list[MatmulProbe]:
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


# --- utilization: tokens per second and MFU ------------------------------------------
# Model FLOPs utilization (MFU) is the rate at which a run does the model's own
# arithmetic, divided by the chip's peak.  It counts what the model needs, not
# what the kernels happen to do: recomputed activations and padded vocabulary
# rows are not "model FLOPs" (PaLM, Chowdhery et al. 2022, appendix B).


def gpt_train_flops_per_token(model: nn.Module, seq_len: Optional[int] = None) -> int:
    """Training FLOPs per token of a :class:`gputrain.model.GPT`: ``6 N + 12 L T C``.

    This is PaLM's appendix-B rule ``6N + 12 L H Q T`` (H heads of width Q, so
    ``H Q = C``), with N the weights of the model's linear layers
    (:func:`matmul_params`: the tied head once, embeddings lookups free) and
    ``T = seq_len`` (default: the model's context).  The attention term counts
    the full T x T score matrix, as PaLM does, even though a causal kernel
    skips half of it.  Appendix "Making it fast".
    """
    cfg = model.cfg
    return train_flops_per_token(matmul_params(model), cfg.n_layer, seq_len or cfg.block_size, cfg.n_embd)


def tokens_per_second(tokens: int, seconds: float) -> float:
    """Throughput of a measured block: ``tokens / seconds`` (one clear error for a zero or negative time)."""
    if not seconds > 0:
        raise ValueError(f"seconds must be > 0 to compute a rate, got {seconds}; time at least one step")
    return tokens / seconds


def mfu(tokens_per_s: float, flops_per_token: float, peak: Optional[float]) -> Optional[float]:
    """Model FLOPs utilization: ``tokens_per_s * flops_per_token / peak`` (``None`` when no peak is known).

    ``peak`` is in FLOP/s: the datasheet's (:func:`gputrain.device.peak_flops`)
    or a measured one (:func:`measured_peak`); :func:`peak_for_mfu` picks.
    """
    if peak is None:
        return None
    if not peak > 0:
        raise ValueError(f"peak must be a positive FLOP/s figure, got {peak}")
    return tokens_per_s * flops_per_token / peak


def measured_peak(dtypes: Sequence[str] = ("bf16",), sizes: Optional[Sequence[int]] = None,
                  dev: Optional[torch.device] = None, target_seconds: float = 0.1) -> MatmulProbe:
    """The fastest square matrix product of a small sweep: a measured stand-in for the peak.

    On a GPU the default sizes are 4096 and 8192 (the bf16 product that gets
    closest to the datasheet); on a CPU, which has no datasheet entry here,
    256 and 512.  MFU against this peak says how close a run comes to what the
    chip's best matrix product actually reaches.
    """
    dev = dev or device()
    sizes = sizes or ((4096, 8192) if dev.type == "cuda" else (256, 512))
    return max(matmul_sweep(sizes, dtypes, dev, target_seconds), key=lambda p: p.tflops)


def peak_for_mfu(dtype: str = "bf16", measured: bool = False, dev: Optional[torch.device] = None
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
    return probe.tflops * 1e12, f"measured: best {probe.dtype} {probe.n}x{probe.n}x{probe.n} product on {device_name(dev)}"


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
    from torch.utils._python_dispatch import TorchDispatchMode

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
            written += [kwargs[arg.name] for arg in schema.arguments
                        if arg.name in kwargs and arg.alias_info and arg.alias_info.is_write]
            fresh = [o for o, ret in zip(out if isinstance(out, tuple) else (out,), schema.returns)
                     if ret.alias_info is None]  # outputs that are not one of the inputs, updated in place
            moved[0] += nbytes((args, kwargs)) + nbytes(written) + nbytes(fresh)  # every input read once
            return out

    with Counter():
        fn(*args, **kwargs)
    return OpCount(calls=dict(sorted(calls.items(), key=lambda kv: -kv[1])), bytes_moved=moved[0])


# --- loss spikes -----------------------------------------------------------------


class SpikeDetector:
    """Flags a training loss far above its recent past: a robust z-score over a window (chapter 6).

    Against the last ``window`` finite losses, a new loss ``x`` scores

    $$z = \\frac{x - \\operatorname{median}}{1.4826\\,\\operatorname{MAD}}$$

    where MAD is the median absolute deviation from the median (1.4826 MAD
    estimates the standard deviation of normal noise).  Median and MAD barely
    move when one batch is wild, unlike a mean and standard deviation, so one
    spike cannot hide itself by inflating the yardstick.  A loss is a spike
    when ``z > threshold`` once ``min_history`` losses have been seen.  The
    scale is floored at ``1e-3 * |median|`` so a perfectly flat history does
    not turn every wobble into a spike.  Non-finite losses are not scored and
    not remembered (the training loop skips those steps on its own).
    """

    def __init__(self, window: int = 50, threshold: float = 6.0, min_history: int = 10):
        if window < 2:
            raise ValueError(f"window must be >= 2 losses, got {window}")
        if not threshold > 0:
            raise ValueError(f"threshold must be a positive z-score, got {threshold}")
        self.window, self.threshold = window, threshold
        self.min_history = max(2, min(min_history, window))
        self.history: list[float] = []

    def score(self, loss: float) -> float:
        """The robust z-score of ``loss`` against the window (0.0 until there is enough history)."""
        if len(self.history) < self.min_history or not math.isfinite(loss):
            return 0.0
        median = statistics.median(self.history)
        mad = statistics.median(abs(v - median) for v in self.history)
        scale = max(1.4826 * mad, 1e-3 * abs(median), 1e-12)
        return (loss - median) / scale

    def update(self, loss: float) -> bool:
        """Score ``loss``, remember it, and say whether it is a spike."""
        if not math.isfinite(loss):
            return False
        spike = self.score(loss) > self.threshold
        self.history.append(float(loss))
        del self.history[:-self.window]
        return spike

    def state_dict(self) -> dict:
        return {"window": self.window, "threshold": self.threshold, "min_history": self.min_history,
                "history": list(self.history)}

    def load_state_dict(self, state: dict) -> None:
        self.history = [float(v) for v in state["history"]][-self.window:]

"""The speed ladder: one GPT trained faster and faster, one change at a time (appendix "Making it fast").

Every rung keeps what the rungs before it switched on and adds one thing:

====  ===========  ==================================================================
 1    fp32         float32 everywhere, a hand-written attention, AdamW's default step
 2    tf32         float32 matrix products on TF32 tensor cores (NVIDIA GPUs only)
 3    fused_adamw  AdamW's whole update in one fused kernel instead of one per operation
 4    bf16         bfloat16 autocast: matrix products in BF16, weights kept in FP32
 5    sdpa         ``F.scaled_dot_product_attention`` (flash attention) replaces it
 6    compile      ``torch.compile``: fused element-wise kernels, fewer launches
 7    batch        a larger batch: more work per launch and per optimizer step
 8    pad_vocab    the vocabulary padded to a multiple of 64 (50257 -> 50304)
====  ===========  ==================================================================

One exception keeps the later rungs honest: a rung that this machine can only
emulate (bf16 on a CPU without native bf16 products, measured once by
:func:`gputrain.speed.native_bf16`) is measured and reported, but the rungs
after it build on the rung before it, so its slowdown does not hide what they
do.  Each row names the rung it builds on.

Same model (same seed, same shape), same data (the same batches in the same
order), and the rungs are timed in alternating rounds (rung 1, 2, ..., 8,
then again), so a neighbour's burst of load slows every rung a little instead
of one rung a lot; each rung reports its median round.  ``gputrain bench``
runs it from the command line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from .data import ByteTokenizer, python_corpus
from .device import device, device_name, synchronize
from .flops import gpt_train_flops_per_token, matmul_params, mfu
from .memory import held_bytes, measure_step
from .model import GPT, CausalSelfAttention, GPTConfig
from .results import first_line, write_result
from .speed import ThroughputMeter, cpu_threads, fp32_matmul, native_bf16, peak_for_mfu

# (name, what changes, why it can help) in ladder order.
RUNGS: list[tuple[str, str, str]] = [
    ("fp32", "fp32 baseline", "float32 everywhere, explicit softmax(QK^T/sqrt(d))V attention"),
    ("tf32", "+ TF32 matmuls", "float32 products on tensor cores with a 10-bit mantissa"),
    ("fused_adamw", "+ fused AdamW", "one kernel updates every parameter: fewer launches and passes over memory"),
    ("bf16", "+ bf16 autocast", "16-bit products run on tensor cores at twice TF32's rate and move half the bytes"),
    ("sdpa", "+ SDPA flash attention", "scores stay in on-chip SRAM: no T x T matrix written to memory"),
    ("compile", "+ torch.compile", "element-wise chains fused into single kernels; less Python per step"),
    ("batch", "+ larger batch", "more tokens per launch and per optimizer step: fixed costs amortized"),
    ("pad_vocab", "+ vocab padded to 64", "a head matrix whose shape tiles evenly onto the tensor cores"),
]
RUNG_NAMES = tuple(name for name, _, _ in RUNGS)
# what torch.compile wraps in the compile rung: name -> meaning (the CLI offers these names)
COMPILE_SCOPES = {"model": "the whole GPT in one graph", "blocks": "each block on its own (compiles faster)"}


@dataclass(kw_only=True)
class LadderConfig:
    n_layer: int = 4  # transformer blocks
    n_head: int = 4  # attention heads per block
    n_embd: int = 128  # width C of the residual stream
    block_size: int = 128  # tokens per sequence T (every step trains on full windows)
    vocab_size: int = 1000  # vocabulary before padding (GPT-2's 50257 is no multiple of 64 either)
    batch_size: int = 8  # sequences per step up to the 'batch' rung
    big_batch_size: int = 32  # sequences per step from the 'batch' rung on
    pad_multiple: int = 64  # the 'pad_vocab' rung rounds vocab_size up to a multiple of this
    steps: int = 3  # timed steps per rung in each round
    rounds: int = 3  # alternating rounds; each rung reports its median round
    warmup: int = 2  # untimed steps per rung before the rounds (the first one compiles)
    compile: bool = True  # run the torch.compile rung (skipped on a CPU without a C compiler)
    compile_scope: str = "model"  # 'model' compiles the whole GPT; 'blocks' each block (compiles faster)
    cold_compile: bool = True  # compile with empty on-disk caches, so compile times are what a first run pays
    threads: int = 0  # CPU threads for the run (0 keeps torch's setting)
    max_seconds: float = 600.0  # wall-time cap: no rung starts after 3/4 of it, no round after it
    measured_peak: bool = True  # also quote MFU against a measured matrix-product peak
    rungs: str = "all"  # comma-separated rung names to run ('all': every rung)
    lr: float = 3e-4  # AdamW learning rate
    seed: int = 0  # seeds the weights and the choice of training windows

    def __post_init__(self) -> None:
        for name in (
            "n_layer",
            "n_head",
            "n_embd",
            "block_size",
            "vocab_size",
            "batch_size",
            "big_batch_size",
            "pad_multiple",
            "steps",
            "rounds",
            "warmup",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        if self.compile_scope not in COMPILE_SCOPES:
            raise ValueError(f"compile_scope={self.compile_scope!r} is not one of: {', '.join(COMPILE_SCOPES)}")
        if self.threads < 0 or not self.max_seconds > 0:
            raise ValueError("threads must be >= 0 and max_seconds > 0")
        unknown = set(self.rung_list()) - set(RUNG_NAMES)
        if unknown:
            raise ValueError(f"unknown rung(s) {', '.join(sorted(unknown))}; use: {', '.join(RUNG_NAMES)}")

    def rung_list(self) -> list[str]:
        if self.rungs == "all":
            return list(RUNG_NAMES)
        return [r.strip() for r in self.rungs.split(",") if r.strip()]


def cpu_ladder(**overrides) -> LadderConfig:
    """A 1 M-parameter GPT on one CPU thread (``gputrain bench --preset cpu``; its help gives the measured time).

    ``torch.compile`` is left out: on two cores its cold compiles alone take
    minutes, longer than every other rung together, and at this size the
    compiled step is no faster (appendix "Making it fast"); ``compile=True``
    (``--compile``) adds it.
    """
    base = dict(threads=1, compile=False, compile_scope="blocks", max_seconds=180.0)
    return LadderConfig(**{**base, **overrides})


def gpu_ladder(**overrides) -> LadderConfig:
    """GPT-2 small (12 x 768, T = 1024, 50257 tokens, 124 M parameters) on one GPU: a few minutes."""
    base = dict(
        n_layer=12,
        n_head=12,
        n_embd=768,
        block_size=1024,
        vocab_size=50257,
        batch_size=8,
        big_batch_size=32,
        steps=5,
        rounds=3,
        warmup=3,
        max_seconds=240.0,
    )
    return LadderConfig(**{**base, **overrides})


def ladder_config(preset_name: str, **overrides) -> LadderConfig:
    """The ladder preset for ``'cpu'`` or ``'gpu'`` with ``overrides`` applied."""
    presets = {"cpu": cpu_ladder, "gpu": gpu_ladder}
    if preset_name not in presets:
        raise ValueError(f"unknown ladder preset {preset_name!r}; use cpu or gpu")
    return presets[preset_name](**overrides)


def padded_vocab(vocab_size: int, multiple: int = 64) -> int:
    """``vocab_size`` rounded up to a multiple of ``multiple``: 50257 -> 50304."""
    return -(-vocab_size // multiple) * multiple


# --- the hand-written attention the SDPA rung replaces ------------------------------------


class HandWrittenAttention(nn.Module):
    """Causal attention written out: ``softmax(Q K^T / sqrt(d) + mask) V``, every T x T matrix in memory.

    It shares the ``qkv`` and ``proj`` layers of the :class:`CausalSelfAttention`
    it replaces (same parameter names, same weights), so the two compute the
    same function and only the kernels differ.
    """

    def __init__(self, attn: CausalSelfAttention, block_size: int):
        super().__init__()
        self.n_head, self.qkv, self.proj, self.resid_drop = attn.n_head, attn.qkv, attn.proj, attn.resid_drop
        self.dropout = attn.dropout
        mask = torch.ones(block_size, block_size, dtype=torch.bool, device=attn.qkv.weight.device).tril()
        self.register_buffer("mask", mask, persistent=False)  # (T, T): True where a query may look

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)  # 3 x (B, T, C)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, T, T): written to memory
        scores = scores.masked_fill(~self.mask[:T, :T], float("-inf"))  # no looking ahead
        weights = F.dropout(F.softmax(scores, dim=-1), self.dropout, self.training)  # (B, H, T, T) again
        y = (weights @ v).transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.resid_drop(self.proj(y))


def use_hand_written_attention(model: GPT) -> GPT:
    """Swap every block's SDPA attention for :class:`HandWrittenAttention`, in place, from outside the model."""
    for block in model.blocks:
        if isinstance(block.attn, CausalSelfAttention):
            block.attn = HandWrittenAttention(block.attn, model.cfg.block_size)
    return model


# --- one rung -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recipe:
    """What a rung switches on (cumulative along the ladder)."""

    tf32: bool = False
    fused_adamw: bool = False
    bf16: bool = False
    sdpa: bool = False
    compile: bool = False
    batch: bool = False
    pad_vocab: bool = False


@contextlib.contextmanager
def fresh_compile_caches(enabled: bool = True):
    """Point Inductor's and Triton's on-disk caches at an empty folder inside the block, then remove it.

    A second run would otherwise load the kernels an earlier run compiled and
    report a compile time of seconds instead of the real cost.
    """
    if not enabled:
        yield
        return
    keys = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
    saved = {k: os.environ.get(k) for k in keys}
    folder = tempfile.mkdtemp(prefix="gputrain_compile_")
    os.environ.update({k: os.path.join(folder, k.split("_")[0].lower()) for k in keys})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(folder, ignore_errors=True)


def rung_label(name: str, label: str, dev: torch.device) -> str:
    """The rung's label, with the bf16 rung marked native or emulated on this device."""
    if name != "bf16":
        return label
    return f"{label} ({'native' if native_bf16(dev.type).native else 'emulated'})"


def left_out_of_base(name: str, dev: torch.device) -> Optional[str]:
    """Why the rungs after ``name`` should not build on it (``None``: they do)."""
    if name == "bf16" and dev.type == "cpu":
        support = native_bf16("cpu")
        if not support.native:
            return (
                f"bf16 is emulated on this CPU ({support.slowdown:.0f}x the fp32 matmul time); "
                "the rungs after it are measured without it"
            )
    return None


def has_c_compiler() -> bool:
    """torch.compile on a CPU writes C++ and needs a compiler to build it."""
    return any(shutil.which(cc) for cc in ("cc", "gcc", "clang", "c++", "g++"))


def skip_reason(name: str, cfg: LadderConfig, dev: torch.device) -> Optional[str]:
    """Why a rung cannot run here (``None`` when it can)."""
    cuda = dev.type == "cuda"
    if name not in cfg.rung_list():
        return "not selected (--rungs)"
    if name == "tf32" and not cuda:
        return "TF32 is a mode of NVIDIA tensor cores; a CPU has none"
    if name == "bf16" and cuda and not torch.cuda.is_bf16_supported():
        return "this GPU has no bf16 (Ampere or newer needed)"
    if name == "compile" and not cfg.compile:
        return "left out (--compile adds it)"
    if name == "compile" and not cuda and not has_c_compiler():
        return "torch.compile on a CPU needs a C compiler; none on PATH"
    if name == "fused_adamw":
        try:
            torch.optim.AdamW([torch.zeros(1, device=dev, requires_grad=True)], fused=True)
        except (RuntimeError, ValueError) as exc:
            return f"fused AdamW not available here ({first_line(exc)})"
    return None


class Batches:
    """The same training windows for every rung: batch ``i`` is always the same ``(x, y)``.

    Windows of the stdlib text (bytes as token ids) at seeded random offsets,
    already on the device; rungs with a smaller batch use the first rows.
    """

    def __init__(self, cfg: LadderConfig, dev: torch.device, n_batches: int = 4):
        T, B = cfg.block_size, cfg.big_batch_size
        text = python_corpus(max_bytes=max(100_000, 4 * (T + 1)))
        tokens = ByteTokenizer.encode_tensor(text)  # (N,) one token per UTF-8 byte
        gen = torch.Generator().manual_seed(cfg.seed)
        starts = torch.randint(0, len(tokens) - T - 1, (n_batches, B), generator=gen)  # (n, B)
        windows = tokens[starts[..., None] + torch.arange(T + 1)] % cfg.vocab_size  # (n, B, T + 1)
        self.x, self.y = windows[..., :-1].to(dev), windows[..., 1:].to(dev)  # (n, B, T) each

    def get(self, i: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        j = i % len(self.x)
        return self.x[j, :batch_size], self.y[j, :batch_size]  # (B, T) each


class Rung:
    """A model, an optimizer and a step, built the way one rung of the ladder says."""

    def __init__(self, name: str, recipe: Recipe, cfg: LadderConfig, data: Batches, dev: torch.device):
        self.name, self.recipe, self.data, self.dev = name, recipe, data, dev
        self.batch_size = cfg.big_batch_size if recipe.batch else cfg.batch_size
        self.vocab_size = padded_vocab(cfg.vocab_size, cfg.pad_multiple) if recipe.pad_vocab else cfg.vocab_size
        torch.manual_seed(cfg.seed)  # same initial weights on every rung
        gcfg = GPTConfig(
            vocab_size=self.vocab_size,
            block_size=cfg.block_size,
            n_layer=cfg.n_layer,
            n_head=cfg.n_head,
            n_embd=cfg.n_embd,
        )
        model = GPT(gcfg).to(dev)
        if not recipe.sdpa:
            use_hand_written_attention(model)
        kwargs = {"fused": True} if recipe.fused_adamw else {}
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), **kwargs)
        self.raw = model
        if recipe.compile and cfg.compile_scope == "blocks":
            for block in model.blocks:
                block.compile(dynamic=False)  # one compiled graph serves every block of this shape
        elif recipe.compile:
            model = torch.compile(model, dynamic=False)  # static shapes: each rung its own kernels
        self.model = model
        self.steps_done = 0
        self.losses: list[float] = []

    def context(self):
        """Precision switches for this rung's step (set per step: rungs alternate)."""
        stack = contextlib.ExitStack()
        if self.dev.type == "cuda":
            stack.enter_context(fp32_matmul("tf32" if self.recipe.tf32 else "ieee"))
        return stack

    def step(self) -> torch.Tensor:
        x, y = self.data.get(self.steps_done, self.batch_size)  # (B, T) each
        with self.context():
            with torch.autocast(self.dev.type, dtype=torch.bfloat16, enabled=self.recipe.bf16):
                _, loss = self.model(x, y)
            loss.backward()
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps_done += 1
        return loss.detach()

    def state_bytes(self) -> int:
        """Bytes of the parameters and optimizer states this rung holds between steps."""
        return held_bytes(self.raw, self.optimizer)

    def cpu_peak_bytes(self) -> Optional[int]:
        """Most bytes allocated at once during one step, counted tensor by tensor (eager rungs on a CPU)."""
        if self.recipe.compile:
            return None  # compiled kernels allocate outside the dispatcher the tracker watches
        x, y = self.data.get(self.steps_done, self.batch_size)
        self.steps_done += 1
        return measure_step(self.raw, self.optimizer, x, y, torch.bfloat16 if self.recipe.bf16 else None)["peak"]


# --- the ladder -----------------------------------------------------------------------------


@dataclass
class LadderResult:
    """What :func:`run_ladder` measured: one row per rung, plus where and against which peaks."""

    config: dict
    device: str
    device_type: str
    flops_per_token: int  # 6N + 12LTC of the unpadded model (PaLM appendix B)
    n_params: int  # N: weights of the linear layers, tied head once
    peak_datasheet: Optional[float]  # FLOP/s, dense bf16 (None on a CPU)
    peak_measured: Optional[float]  # FLOP/s, best matrix product measured here
    peak_measured_source: str
    threads: int
    rows: list[dict] = field(default_factory=list)
    rounds_done: int = 0
    seconds_total: float = 0.0
    notes: list[str] = field(default_factory=list)

    def measured_rows(self) -> list[dict]:
        return [r for r in self.rows if r.get("tokens_per_s")]

    def row(self, name: str) -> dict:
        return next(r for r in self.rows if r["rung"] == name)

    def table(self) -> str:
        """The ladder as a text table: what each rung builds on, tokens/s, speed-ups, MFU, peak memory, notes."""
        c = self.config
        measured = {r["rung"]: r for r in self.measured_rows()}
        base = next(iter(measured.values()), {}).get("tokens_per_s")
        lines = [
            f"speed ladder on {self.device} ({self.device_type}), {self.threads} thread(s): GPT {c['n_layer']} x "
            f"{c['n_embd']}, {c['n_head']} heads, T = {c['block_size']}, vocab {c['vocab_size']}",
            f"{'rung':<26} {'on top of':<12} {'tokens/s':>9} {'x fp32':>6} {'x prev':>6} {'MFU':>6} {'MFU meas':>8} "
            f"{'peak mem':>10}  note",
        ]
        pct = lambda v: f"{v:6.1%}" if v is not None else f"{'n/a':>6}"  # noqa: E731
        for r in self.rows:
            if not r.get("tokens_per_s"):
                lines.append(f"{r['label']:<26} {'':<12} {'-':>9}  skipped: {r['skipped']}")
                continue
            prev = measured.get(r.get("builds_on") or "", {}).get("tokens_per_s")
            over_prev = f"{r['tokens_per_s'] / prev:5.2f}x" if prev else f"{'-':>6}"
            notes = [f"compile {r['compile_seconds']:.1f} s"] if r.get("compile_seconds") is not None else []
            if r.get("left_out_of_base"):
                notes.append("later rungs leave it out")
            lines.append(
                f"{r['label']:<26} {r.get('builds_on') or '-':<12} {r['tokens_per_s']:9,.0f} "
                f"{r['tokens_per_s'] / base:5.2f}x {over_prev} "
                f"{pct(r['mfu'])} {pct(r['mfu_measured']):>8} {_bytes_text(r.get('peak_memory_bytes'))}  "
                + "; ".join(notes)
            )
        lines.append(
            f"{self.rounds_done} of {c['rounds']} rounds of {c['steps']} steps per rung (each rung's median round); "
            f"{self.seconds_total:.0f} s in all"
        )
        lines += [f"note: {r['label']}: {r['left_out_of_base']}" for r in self.rows if r.get("left_out_of_base")]
        lines += [f"CAPPED: {n}" for n in self.notes]
        return "\n".join(line.rstrip() for line in lines)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "LadderResult":
        """A result read back from its JSON (``read_result(path)["data"]``); extra keys are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def _bytes_text(n: Optional[int]) -> str:
    if not n:
        return f"{'n/a':>10}"
    return f"{n / 2**30:7.2f} GiB" if n >= 2**30 else f"{n / 2**20:7.1f} MiB"


def run_ladder(
    cfg: LadderConfig,
    dev: Optional[torch.device] = None,
    out=None,
    command: str = "",
    log: Callable[[str], None] = print,
) -> LadderResult:
    """Build every rung, warm each up, time them in alternating rounds, and return the table's data.

    With ``out`` the result is written (via :func:`gputrain.results.write_result`)
    after the warm-up and after every round, so a run cut short still leaves
    what it measured.  Appendix "Making it fast" explains each rung.
    """
    dev = dev or device()
    t_start = time.perf_counter()
    threads = contextlib.nullcontext() if not cfg.threads or dev.type != "cpu" else cpu_threads(cfg.threads)
    with threads, fresh_compile_caches(cfg.compile and cfg.cold_compile and "compile" in cfg.rung_list()):
        result = _empty_result(cfg, dev)
        save = (lambda: write_result(out, result.to_dict(), command=command)) if out else (lambda: None)
        rungs = _build_rungs(cfg, dev, result, t_start, save, log)
        _time_rounds(cfg, dev, result, rungs, t_start, save, log)
        if dev.type == "cpu":  # no allocator statistics on a CPU: count one step's tensors instead
            for rung, row in rungs:
                row["peak_memory_bytes"] = rung.cpu_peak_bytes()
        for rung, row in rungs:
            row["last_loss"] = rung.losses[-1] if rung.losses else None
        result.seconds_total = time.perf_counter() - t_start
        save()
    return result


def _empty_result(cfg: LadderConfig, dev: torch.device) -> LadderResult:
    """The result's header: the model's N and FLOPs per token (counted on the meta device) and the peaks."""
    with torch.device("meta"):  # N and the FLOPs per token, without allocating a model
        shape = GPT(
            GPTConfig(
                vocab_size=cfg.vocab_size,
                block_size=cfg.block_size,
                n_layer=cfg.n_layer,
                n_head=cfg.n_head,
                n_embd=cfg.n_embd,
            )
        )
    sheet, _ = peak_for_mfu("bf16", dev=dev) if dev.type == "cuda" else (None, "")
    measured, source = (
        peak_for_mfu("bf16", measured=True, dev=dev) if cfg.measured_peak or sheet is None else (None, "")
    )
    return LadderResult(
        config=dataclasses.asdict(cfg),
        device=device_name(dev),
        device_type=dev.type,
        flops_per_token=gpt_train_flops_per_token(shape),
        n_params=matmul_params(shape),
        peak_datasheet=sheet,
        peak_measured=measured,
        peak_measured_source=source,
        threads=torch.get_num_threads(),
    )


def _build_rungs(cfg, dev, result: LadderResult, t_start: float, save, log) -> list[tuple[Rung, dict]]:
    """Each rung adds one change to the base recipe; build and warm up those not skipped.

    A rung joins the base that later rungs build on unless :func:`left_out_of_base` says otherwise.
    """
    data = Batches(cfg, dev)
    base, base_name, rungs = Recipe(), None, []
    for name, label, why in RUNGS:
        row = {"rung": name, "label": rung_label(name, label, dev), "why": why, "skipped": skip_reason(name, cfg, dev)}
        # a rung starts only in the first three quarters of the cap: the rounds need the rest
        if row["skipped"] is None and rungs and time.perf_counter() - t_start > 0.75 * cfg.max_seconds:
            row["skipped"] = f"not run: the {cfg.max_seconds:.0f} s time cap was near"
        recipe = base
        if row["skipped"] is None:
            recipe = dataclasses.replace(base, **{name: True}) if name != "fp32" else base
            row.update(builds_on=base_name, left_out_of_base=left_out_of_base(name, dev))
            if not row["left_out_of_base"]:
                base, base_name = recipe, name
            log(f"warming up {row['label']} ...")
            rung = Rung(name, recipe, cfg, data, dev)
            row.update(_warm_up(rung, cfg))
            rungs.append((rung, row))
        row["settings"] = dataclasses.asdict(recipe)
        result.rows.append(row)
        save()  # a run cut short (a compile too slow for a deadline) keeps the warm-ups so far
    return rungs


def _time_rounds(cfg, dev, result: LadderResult, rungs, t_start: float, save, log) -> None:
    """Alternate the rungs round by round (so a change in machine load hits all alike) within the time cap."""
    meters = {rung.name: ThroughputMeter(dev) for rung, _ in rungs}
    peaks: dict[str, list[int]] = {rung.name: [] for rung, _ in rungs}
    last_round = 0.0
    for r in range(cfg.rounds):
        elapsed = time.perf_counter() - t_start
        if r and elapsed + last_round > cfg.max_seconds:
            result.notes.append(f"stopped after {r} of {cfg.rounds} rounds: the {cfg.max_seconds:.0f} s cap")
            break
        t_round = time.perf_counter()
        for rung, row in rungs:
            peaks[rung.name].append(_timed_round(rung, cfg, meters[rung.name]))
        last_round = time.perf_counter() - t_round
        result.rounds_done = r + 1
        _fill_rows(result, rungs, meters, peaks, cfg)
        result.seconds_total = time.perf_counter() - t_start
        save()
        log(f"round {r + 1}/{cfg.rounds} done in {last_round:.1f} s")


def _warm_up(rung: Rung, cfg: LadderConfig) -> dict:
    """Untimed steps; the first one's extra time is the compile (and first-call) cost."""
    times, first_loss = [], None
    for i in range(cfg.warmup + (1 if rung.recipe.compile else 0)):
        synchronize(rung.dev)
        t0 = time.perf_counter()
        loss = rung.step()
        value = loss.item()  # waits for the step
        times.append(time.perf_counter() - t0)
        if i == 0:
            first_loss = value
    steady = statistics.median(times[1:]) if len(times) > 1 else times[0]
    return {
        "batch_size": rung.batch_size,
        "vocab_size": rung.vocab_size,
        "first_loss": first_loss,
        "first_step_seconds": times[0],
        "compile_seconds": max(times[0] - steady, 0.0) if rung.recipe.compile else None,
    }


def _timed_round(rung: Rung, cfg: LadderConfig, meter: ThroughputMeter) -> int:
    """``cfg.steps`` timed steps of one rung; returns its peak memory in bytes (0 on a CPU)."""
    cuda = rung.dev.type == "cuda"
    if cuda:
        torch.cuda.synchronize(rung.dev)
        base = torch.cuda.memory_allocated(rung.dev)
        torch.cuda.reset_peak_memory_stats(rung.dev)
    tokens = cfg.steps * rung.batch_size * cfg.block_size
    with meter.measure(tokens):
        for _ in range(cfg.steps):
            loss = rung.step()
    rung.losses.append(loss.item())
    if not cuda:
        return 0
    # the allocator's peak counts every rung's resident weights: keep only this rung's own
    return torch.cuda.max_memory_allocated(rung.dev) - base + rung.state_bytes()


def _fill_rows(result: LadderResult, rungs, meters, peaks, cfg: LadderConfig) -> None:
    for rung, row in rungs:
        tps = meters[rung.name].tokens_per_s
        row.update(
            tokens_per_s=tps,
            rounds_tokens_per_s=meters[rung.name].rates,
            step_seconds=rung.batch_size * cfg.block_size / tps,
            mfu=mfu(tps, result.flops_per_token, result.peak_datasheet),
            mfu_measured=mfu(tps, result.flops_per_token, result.peak_measured),
            peak_memory_bytes=max(peaks[rung.name]) or None,
        )


def plan(cfg: LadderConfig, dev: Optional[torch.device] = None) -> str:
    """What :func:`run_ladder` would do here, without running anything (``gputrain bench --dry-run``)."""
    dev = dev or device()
    lines = [
        f"speed ladder on {device_name(dev)} ({dev.type}): GPT {cfg.n_layer} x "
        f"{cfg.n_embd}, {cfg.n_head} heads, T={cfg.block_size}, vocab {cfg.vocab_size}; "
        f"{cfg.warmup} warm-up + {cfg.rounds} rounds x {cfg.steps} steps per rung, cap {cfg.max_seconds:.0f} s"
    ]
    for i, (name, label, why) in enumerate(RUNGS, 1):
        skip = skip_reason(name, cfg, dev)
        lines.append(f"{i}. {label:<24} {'SKIP: ' + skip if skip else why}")
    return "\n".join(lines)

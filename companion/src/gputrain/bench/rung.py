"""One rung of the ladder: its recipe, why it may be skipped here, its batches, and its model and step."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Optional

import torch

from ..data import ByteTokenizer, python_corpus
from ..memory import held_bytes, measure_step
from ..model import GPT, GPTConfig
from ..results import first_line
from ..speed import fp32_matmul, native_bf16
from .attention import use_hand_written_attention
from .config import LadderConfig, padded_vocab


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

"""The ladder's rungs and its configuration: what each rung adds, the CPU and GPU presets (appendix "Making it fast").

:data:`RUNGS` lists the eight rungs in ladder order; :class:`LadderConfig` holds
the model's shape, the batches, the timing rounds and the time cap, and the two
presets size it for one CPU thread or one GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

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

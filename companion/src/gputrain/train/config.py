"""Configuration of a training run (chapter 6): ``TrainConfig`` and its presets.

A typed keyword-only dataclass with one comment per field: the comments are
the ``gputrain train`` flags' help.  It validates itself on construction, so
a bad value is one clear error before anything runs or is written.
``gputrain.train`` re-exports everything here.  The names a choice may take
(optimizer, schedule, mixed precision) live in :mod:`gputrain.train.components`,
which knows nothing of this module (imports go one way).  The comment line
above each group of fields is that group's heading in ``gputrain train --help``.
"""

from __future__ import annotations

import glob
from collections import Counter
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable

from ..bounds import check_fields, check_together
from ..model import GPTConfig
from ..moe import BALANCES, ROUTERS
from .components import MIXED_PRECISION, OPTIMIZERS, SCHEDULES, choice_error

# Bytes of the standard library a run reads when corpus_bytes is 0: the notebooks' size on a CPU.
STDLIB_DEFAULT_BYTES = 400_000


@dataclass(kw_only=True)
class TrainConfig:
    """Everything one training run needs, validated on construction (chapter 6).

    Each field is a ``gputrain train`` flag whose help is the comment after it;
    the presets :func:`tiny`, :func:`small` and :func:`gpt2_small` fill in sizes.
    A bad value raises one ``ValueError`` (a missing file ``FileNotFoundError``)
    naming the fix.
    """

    # model shape
    vocab_size: int = 256  # output classes; bytes need 256
    block_size: int = 64  # longest context (positions) the model can see
    n_layer: int = 2  # transformer blocks
    n_head: int = 4  # attention heads per block
    n_embd: int = 64  # width C of the residual stream
    dropout: float = 0.0  # dropout probability on the embeddings and the attention and MLP outputs
    bias: bool = True  # biases in the Linear and LayerNorm layers (GPT-2 has them; nanoGPT's default has none)
    tie_embeddings: bool = True  # the output head shares the token embedding's matrix (GPT-2, nanoGPT)
    # experts (chapter 9): n_experts > 0 swaps the MLPs for DeepSeekMoE layers
    n_experts: int = 0  # routed experts per MoE block (0: a dense model)
    n_shared_experts: int = 1  # always-on shared experts per MoE block
    top_k: int = 2  # routed experts each token uses
    expert_hidden: int = 0  # hidden width of one expert (0: 4C // (top_k + shared), dense-sized compute)
    router: str = "sigmoid"  # sigmoid (DeepSeek-V3) or softmax (Switch/GShard)
    capacity_factor: float = 0.0  # tokens an expert takes, as a multiple of its fair share (0: dropless)
    balance: str = "bias"  # none, aux (auxiliary loss) or bias (DeepSeek-V3's aux-loss-free bias)
    aux_loss_weight: float = 0.01  # alpha of the auxiliary balance loss (balance=aux)
    bias_gamma: float = 1e-3  # step of the aux-loss-free bias after each optimizer step (balance=bias)
    moe_first_dense: int = 0  # the first blocks stay dense (DeepSeek-V3: 3)
    # data
    data: str = "stdlib"  # 'stdlib' (Python's own source), text files 'a.txt,dir/*.py', or 'hf:NAME[:SPLIT]'
    corpus_bytes: int = 0  # read at most this many bytes of text (0: all of --data; of 'stdlib' its first 400,000)
    cache_dir: str = ""  # where tokenized data is cached ('': $GPUTRAIN_CACHE or ~/.cache/gputrain; 'none': memory)
    seq_len: int = 0  # tokens per training window T (0: the model's block_size)
    val_fraction: float = 0.1  # trailing share of the text held out for validation
    seed: int = 1337  # seeds Python, NumPy, torch and the data order
    # batch and length
    batch_size: int = 32  # sequences per micro-batch, per process
    grad_accum_steps: int = 1  # micro-batches summed into one optimizer step
    max_steps: int = 200  # optimizer steps to run; a resume may raise it and keeps its schedule (schedule_steps)
    # optimisation
    optimizer: str = "adamw"  # the optimizer (chapter 5)
    lr: float = 3e-3  # peak learning rate
    beta1: float = 0.9  # first-moment decay (Adam, Lion), or the momentum coefficient (not Muon's: 0.95)
    beta2: float = 0.95  # second-moment decay (Adam), Lion's slow average, RMSprop's alpha
    schedule: str = "cosine"  # the learning-rate schedule, each after warmup_steps
    warmup_steps: int = 20  # linear warmup steps before the schedule
    min_lr_ratio: float = 0.1  # the schedule decays to lr * min_lr_ratio
    decay_fraction: float = 0.2  # wsd: share of the steps spent decaying at the end
    restart_steps: int = 0  # cosine-restarts: steps per cycle (0: a quarter of the steps after warmup)
    schedule_steps: int = 0  # steps the schedule spans (0: max_steps); steps past it run at its final rate
    weight_decay: float = 0.1  # weight decay on matrices (not biases, norms); decoupled in adamw and lion
    grad_clip: float = 1.0  # max global gradient norm (0 disables clipping)
    # precision, speed and memory
    mixed_precision: str = "no"  # the mixed precision, via Accelerate
    compile: bool = False  # torch.compile the model (Accelerate's dynamo backend 'inductor')
    tf32: bool = True  # on NVIDIA GPUs, run float32 matmuls on TF32 tensor cores (no effect on a CPU)
    activation_checkpointing: bool = False  # recompute each block's activations in backward (chapter 7)
    fsdp: bool = False  # shard with FSDP2 through Accelerate (CUDA, distributed launch)
    # validation and early stopping
    eval_interval: int = 50  # steps between validation passes (0 disables)
    eval_batches: int = 8  # batches per validation pass
    patience: int = 0  # validation passes without improvement before stopping (0 never stops early)
    # stability
    spike_window: int = 50  # past losses the spike detector compares with (0 disables it)
    spike_threshold: float = 6.0  # robust z-score above which a loss counts as a spike
    skip_spikes: bool = False  # drop the update of a step whose loss spikes (else only log it)
    max_bad_steps: int = 5  # non-finite steps in a row that stop the run
    # output: checkpoints, resume and the log; Ctrl-C or SIGTERM saves a checkpoint after the current step
    checkpoint_dir: str = ""  # directory for checkpoints ('' writes none; a resume keeps saving where it read)
    checkpoint_interval: int = 0  # steps between checkpoints (0: only at the end)
    keep_checkpoints: int = 2  # newest checkpoints kept on disk
    resume_from: str = ""  # checkpoint (or checkpoint_dir: its newest) to continue, with the settings it holds
    allow_config_change: bool = False  # let a resume change what the run computes (data, batch, lr, ...)
    log_dir: str = ""  # directory for metrics.csv ('' writes none)
    tensorboard: bool = False  # also log to TensorBoard in log_dir (needs the tensorboard package)
    progress: bool = True  # progress bar and event messages on the main process

    def __post_init__(self) -> None:
        self._check_types()  # first: every later check may compare numbers
        self._check_numbers()
        self._check_choices()
        self._check_paths()
        data_source(self)  # missing files or a missing datasets package fail here, before anything runs
        self.model_config()  # the model validates its own shape (n_embd divisible by n_head, ...)

    def _check_types(self) -> None:
        for f in fields(self):
            value, kind = getattr(self, f.name), type(f.default)
            ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                ok = True
            if not ok:
                raise ValueError(f"{f.name} must be a {kind.__name__}, got {value!r}")

    def _check_numbers(self) -> None:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        check_fields(values)  # the same rules gputrain train applies to its flags before torch loads
        check_together(values)

    def _check_choices(self) -> None:
        for name, table in (
            ("optimizer", OPTIMIZERS),
            ("schedule", SCHEDULES),
            ("mixed_precision", MIXED_PRECISION),
            ("router", ROUTERS),
            ("balance", BALANCES),
        ):
            if getattr(self, name) not in table:
                raise choice_error(name, getattr(self, name), table)
        if self.patience and not self.eval_interval:
            raise ValueError("patience needs validation passes; set eval_interval > 0")
        if self.checkpoint_interval and not self.checkpoint_dir:
            raise ValueError("checkpoint_interval needs a checkpoint_dir to write to")
        if self.tensorboard:
            if not self.log_dir:
                raise ValueError("tensorboard needs a log_dir to write to")
            try:
                import tensorboard  # noqa: F401
            except ImportError:
                raise ValueError("tensorboard=True needs the tensorboard package: pip install tensorboard") from None

    def _check_paths(self) -> None:
        for name in ("checkpoint_dir", "log_dir"):  # before a run trains for hours and then cannot save
            if getattr(self, name) and Path(getattr(self, name)).exists() and not Path(getattr(self, name)).is_dir():
                raise ValueError(f"{name}={getattr(self, name)!r} is a file; pass a directory (new or empty)")
        if self.resume_from and not Path(self.resume_from).exists():
            raise FileNotFoundError(
                f"resume_from={self.resume_from!r} does not exist; pass a checkpoint directory written by gputrain"
            )

    @property
    def schedule_length(self) -> int:
        """Steps the learning-rate schedule spans: ``schedule_steps``, or ``max_steps`` when it is 0."""
        return self.schedule_steps or self.max_steps

    @property
    def window(self) -> int:
        """Tokens per training window: ``seq_len``, or the whole context when it is 0."""
        return self.seq_len or self.block_size

    def model_config(self) -> GPTConfig:
        moe = {}
        if self.n_experts:  # the GPT validates these (top_k <= n_experts, ...)
            moe = dict(
                n_experts=self.n_experts,
                n_shared_experts=self.n_shared_experts,
                top_k=self.top_k,
                expert_hidden=self.expert_hidden,
                router=self.router,
                capacity_factor=self.capacity_factor or None,
                balance=self.balance,
                aux_loss_weight=self.aux_loss_weight,
                bias_gamma=self.bias_gamma,
                moe_first_dense=self.moe_first_dense,
            )
        return GPTConfig(
            vocab_size=self.vocab_size,
            block_size=self.block_size,
            n_layer=self.n_layer,
            n_head=self.n_head,
            n_embd=self.n_embd,
            dropout=self.dropout,
            bias=self.bias,
            tie_embeddings=self.tie_embeddings,
            **moe,
        )


def tiny(**overrides) -> TrainConfig:
    """A 0.1 M-parameter GPT that learns Python source in a minute on two CPU cores (chapter 6)."""
    return TrainConfig(**overrides)


def small(**overrides) -> TrainConfig:
    """A 10 M-parameter GPT (6 x 384, context 256): minutes on one GPU, hours on a CPU (chapter 6)."""
    base = dict(
        n_layer=6,
        n_head=6,
        n_embd=384,
        block_size=256,
        dropout=0.1,
        batch_size=64,
        max_steps=5000,
        lr=1e-3,
        warmup_steps=200,
        eval_interval=250,
        eval_batches=20,
    )
    return TrainConfig(**{**base, **_stdlib_bytes(overrides, 20_000_000), **overrides})


def _stdlib_bytes(overrides: dict, n: int) -> dict:
    """A preset's size for the stdlib corpus; a run on the user's own --data reads all of it."""
    return {"corpus_bytes": n} if overrides.get("data", "stdlib") == "stdlib" else {}


def gpt2_small(**overrides) -> TrainConfig:
    """GPT-2 small's shape (12 x 768, context 1024) on bytes, ~0.5 M tokens per step: a GPU preset.

    Launching it on many GPUs is the appendix "Running at scale".

    With the 256-byte vocabulary it has 86 M parameters rather than GPT-2's
    124 M (whose 50,257-token vocabulary alone holds 39 M).
    """
    base = dict(
        n_layer=12,
        n_head=12,
        n_embd=768,
        block_size=1024,
        batch_size=16,
        grad_accum_steps=32,
        max_steps=10_000,
        lr=6e-4,
        warmup_steps=700,
        mixed_precision="bf16",
        compile=True,
        eval_interval=500,
        eval_batches=40,
        checkpoint_dir="checkpoints/gpt2_small",
        checkpoint_interval=1000,
    )
    return TrainConfig(**{**base, **_stdlib_bytes(overrides, 2_000_000_000), **overrides})


PRESETS: dict[str, Callable[..., TrainConfig]] = {"tiny": tiny, "small": small, "gpt2_small": gpt2_small}


def preset_config(name: str, **overrides) -> TrainConfig:
    """The preset called ``name`` with ``overrides`` applied."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; use one of: {', '.join(PRESETS)}")
    return PRESETS[name](**overrides)


def data_source(cfg: TrainConfig) -> list[Path] | str:
    """``cfg.data`` resolved: ``'stdlib'``, ``'hf:...'``, or the list of text files it names."""
    if cfg.data == "stdlib":
        return "stdlib"
    if cfg.data.startswith("hf:"):
        try:
            import datasets  # noqa: F401
        except ImportError:
            raise ValueError(f"data={cfg.data!r} needs the datasets package: pip install datasets") from None
        return cfg.data
    paths: list[Path] = []
    for entry in filter(None, (e.strip() for e in cfg.data.split(","))):
        if Path(entry).is_dir():
            raise _directory_error(Path(entry))
        matches = sorted(glob.glob(entry, recursive=True)) if glob.has_magic(entry) else [entry]
        files = [Path(m) for m in matches if Path(m).is_file()]
        if not files:
            what = (
                f"no file matches data pattern {entry!r}" if glob.has_magic(entry) else f"data file {entry!r} not found"
            )
            raise FileNotFoundError(f"{what}; pass existing text files, a glob, or 'stdlib'")
        paths += files
    if not paths:
        raise ValueError("data is empty; pass text files, 'hf:NAME' or 'stdlib'")
    return paths


def _directory_error(directory: Path) -> ValueError:
    """A directory given as data: the glob that reads its files (of the commonest suffix), or that it has none."""
    hidden = lambda p: any(part.startswith(".") for part in p.relative_to(directory).parts)  # noqa: E731
    files = [p for p in directory.rglob("*") if p.is_file() and not hidden(p)]
    if not files:
        return ValueError(f"data={str(directory)!r} is a directory with no files in it; point --data at text files")
    suffix, count = Counter(p.suffix for p in files).most_common(1)[0]
    pattern = str(directory / "**" / f"*{suffix}")
    return ValueError(
        f"data={str(directory)!r} is a directory; pass its files with a glob: --data '{pattern}' "
        f"({count} file{'s' if count > 1 else ''})"
    )

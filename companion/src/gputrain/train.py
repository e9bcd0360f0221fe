"""The training loop (chapter 6): ``train(cfg) -> TrainResult`` on Hugging Face Accelerate.

Built the way Accelerate's own examples are: one ``Accelerator``, one
``prepare``, ``accelerator.backward``; the step is a short named function.
The same code runs on a CPU, one GPU, or several processes under
``accelerate launch``.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Optional

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from .data import ByteTokenizer, TokenDataset, infinite, python_corpus, split_tokens
from .model import GPT, GPTConfig


@dataclass(kw_only=True)
class TrainConfig:
    # model shape
    vocab_size: int = 256  # byte-level tokenizer by default
    block_size: int = 64  # context length T of every training window
    n_layer: int = 2  # transformer blocks
    n_head: int = 4  # attention heads
    n_embd: int = 64  # residual width C
    dropout: float = 0.0  # dropout probability
    # data
    corpus_bytes: int = 400_000  # bytes of the offline stdlib corpus to train on
    val_fraction: float = 0.1  # trailing share of the corpus held out for validation
    # optimisation
    batch_size: int = 32  # sequences per step (per process)
    max_steps: int = 200  # optimizer steps
    lr: float = 3e-3  # peak learning rate (AdamW)
    warmup_steps: int = 20  # linear warmup before cosine decay
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    weight_decay: float = 0.1  # decoupled weight decay on matrices
    grad_clip: float = 1.0  # max global gradient norm (0 disables)
    mixed_precision: str = "no"  # "no" | "bf16" | "fp16", passed to Accelerate
    # bookkeeping
    eval_interval: int = 50  # steps between validation passes (0 disables)
    eval_batches: int = 8  # batches per validation pass
    seed: int = 1337  # seeds Python, NumPy and torch on every process
    progress: bool = True  # tqdm progress bar on the main process

    def __post_init__(self) -> None:
        positive = ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "corpus_bytes",
                    "batch_size", "max_steps", "eval_batches")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        non_negative = ("warmup_steps", "weight_decay", "grad_clip", "eval_interval")
        for name in non_negative:
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not self.lr > 0 or not math.isfinite(self.lr):
            raise ValueError(f"lr must be a positive number, got {self.lr}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.warmup_steps > self.max_steps:
            raise ValueError(
                f"warmup_steps={self.warmup_steps} exceeds max_steps={self.max_steps}; shorten the warmup"
            )
        if self.mixed_precision not in ("no", "bf16", "fp16"):
            raise ValueError(f"mixed_precision must be one of no, bf16, fp16; got {self.mixed_precision!r}")
        # the model validates its own shape (n_embd divisible by n_head, ...)
        self.model_config()

    def model_config(self) -> GPTConfig:
        return GPTConfig(vocab_size=self.vocab_size, block_size=self.block_size, n_layer=self.n_layer,
                         n_head=self.n_head, n_embd=self.n_embd, dropout=self.dropout)


def tiny(**overrides) -> TrainConfig:
    """A GPT that trains in well under a minute on two CPU cores."""
    return TrainConfig(**overrides)


@dataclass
class TrainResult:
    losses: list[float]  # training loss at every step
    val_losses: list[tuple[int, float]]  # (step, validation loss) at each evaluation
    lrs: list[float]  # learning rate at every step
    tokens_per_s: float  # training throughput over the whole run (all processes)
    seconds: float  # wall time of the loop
    model: torch.nn.Module = field(repr=False)  # the trained model (unwrapped)
    config: TrainConfig = field(repr=False)

    def summary(self) -> dict:
        return {"first_loss": self.losses[0], "final_loss": self.losses[-1],
                "val_losses": self.val_losses, "tokens_per_s": self.tokens_per_s,
                "seconds": self.seconds, "config": asdict(self.config)}


def lr_lambda(cfg: TrainConfig):
    """Linear warmup, then cosine decay to ``min_lr_ratio`` (multiplier of ``cfg.lr``)."""

    def f(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        progress = (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps)
        cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * cosine

    return f


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW with weight decay on matrices only (not on biases, norms)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95))


def train_step(model, batch, optimizer, scheduler, accelerator: Accelerator, grad_clip: float) -> float:
    """One optimizer step: forward, loss, backward, clip, update.  Returns the loss."""
    x, y = batch  # (B, T), (B, T)
    _, loss = model(x, y)
    accelerator.backward(loss)
    if grad_clip > 0:
        accelerator.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


@torch.no_grad()
def evaluate(model, loader, accelerator: Accelerator, max_batches: int) -> float:
    """Mean validation loss over up to ``max_batches`` batches, across processes."""
    model.eval()
    losses = []
    for i, (x, y) in enumerate(loader):
        if i >= max_batches:
            break
        _, loss = model(x, y)
        losses.append(accelerator.gather_for_metrics(loss.reshape(1)))
    model.train()
    return torch.cat(losses).mean().item()


def build_data(cfg: TrainConfig) -> tuple[TokenDataset, TokenDataset]:
    text = python_corpus(max_bytes=cfg.corpus_bytes)
    tokens = torch.tensor(ByteTokenizer().encode(text), dtype=torch.long)
    train_tokens, val_tokens = split_tokens(tokens, cfg.val_fraction)
    return TokenDataset(train_tokens, cfg.block_size), TokenDataset(val_tokens, cfg.block_size)


def train(cfg: TrainConfig) -> TrainResult:
    """Train a GPT on the offline corpus and return its loss history and the model."""
    accelerator = Accelerator(mixed_precision=cfg.mixed_precision, cpu=not torch.cuda.is_available())
    set_seed(cfg.seed)
    with accelerator.main_process_first():
        train_set, val_set = build_data(cfg)
    train_loader = DataLoader(train_set, batch_size=cfg.batch_size, shuffle=True, drop_last=True)
    val_loader = DataLoader(val_set, batch_size=cfg.batch_size, shuffle=False)

    model = GPT(cfg.model_config())
    optimizer = make_optimizer(model, cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg))
    model, optimizer, train_loader, val_loader, scheduler = accelerator.prepare(
        model, optimizer, train_loader, val_loader, scheduler
    )

    losses, val_losses, lrs = [], [], []
    tokens_per_step = cfg.batch_size * cfg.block_size * accelerator.num_processes
    bar = tqdm(total=cfg.max_steps, disable=not (cfg.progress and accelerator.is_main_process),
               desc="train", unit="step")
    batches = infinite(train_loader)
    t0 = time.perf_counter()
    for step in range(cfg.max_steps):
        lrs.append(scheduler.get_last_lr()[0])
        loss = train_step(model, next(batches), optimizer, scheduler, accelerator, cfg.grad_clip)
        losses.append(loss.item())
        if cfg.eval_interval and ((step + 1) % cfg.eval_interval == 0 or step + 1 == cfg.max_steps):
            val_losses.append((step + 1, evaluate(model, val_loader, accelerator, cfg.eval_batches)))
        elapsed = time.perf_counter() - t0
        bar.set_postfix(loss=f"{losses[-1]:.3f}", tok_s=f"{tokens_per_step * (step + 1) / elapsed:,.0f}")
        bar.update()
    bar.close()
    seconds = time.perf_counter() - t0
    return TrainResult(losses=losses, val_losses=val_losses, lrs=lrs,
                       tokens_per_s=tokens_per_step * cfg.max_steps / seconds, seconds=seconds,
                       model=accelerator.unwrap_model(model), config=cfg)


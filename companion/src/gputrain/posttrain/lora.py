"""LoRA from scratch: a frozen layer plus a trainable low-rank update (chapter 12; Hu et al., 2021).

A linear layer ``y = W x + b`` becomes ``y = W x + b + (alpha / r) B A x``, with
A of shape (r, in) and B of shape (out, r).  Only A and B train, so a layer of
``in * out`` weights trains ``r * (in + out)``.  A starts as an ``nn.Linear``
weight does (Kaiming-uniform with a = sqrt(5)), B at zero, so the model at the
first step is exactly the pretrained one; this is PEFT's default
(``LoraLayer.reset_lora_parameters``), and the tests check that our layer and
PEFT's ``LoraModel`` agree on the same A and B.  :meth:`LoRALinear.merge` folds
``(alpha / r) B A`` into W, so the merged model costs nothing extra to run.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..memory import MemoryBreakdown, finetune_memory

# The book's GPT names its block linears attn.qkv, attn.proj, mlp.fc and mlp.proj.
DEFAULT_TARGETS = ("attn.qkv", "attn.proj", "mlp.fc", "mlp.proj")


class LoRALinear(nn.Module):
    """``base(x) + (alpha / r) B A x`` around a frozen ``nn.Linear`` (chapter 12)."""

    def __init__(self, base: nn.Linear, r: int, alpha: float, *, name: str = "layer"):
        super().__init__()
        check_rank(r, base, name)
        if not alpha > 0:
            raise ValueError(f"LoRA alpha must be > 0, got {alpha}; the usual choice is alpha = r or 2r")
        self.base = base
        for p in base.parameters():
            p.requires_grad_(False)
        w = base.weight
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features, device=w.device, dtype=w.dtype))  # (r, in)
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r, device=w.device, dtype=w.dtype))  # (out, r)
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # as nn.Linear and PEFT do
        self.r, self.alpha, self.scale = r, alpha, alpha / r
        self.merged = False

    def delta_weight(self) -> torch.Tensor:
        """The update the adapter adds to W: (alpha / r) B A, of W's shape (out, in)."""
        return (self.lora_B @ self.lora_A) * self.scale  # (out, r) @ (r, in)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)  # (..., out)
        if self.merged:
            return y  # W already holds the update
        return y + F.linear(F.linear(x, self.lora_A), self.lora_B) * self.scale  # (..., r) then (..., out)

    @torch.no_grad()
    def merge(self) -> None:
        """W += (alpha / r) B A; the adapter stops adding its own path."""
        if not self.merged:
            self.base.weight += self.delta_weight()
            self.merged = True

    @torch.no_grad()
    def unmerge(self) -> None:
        """W -= (alpha / r) B A: the frozen weights back, up to the rounding of one add and one subtract."""
        if self.merged:
            self.base.weight -= self.delta_weight()
            self.merged = False

    def extra_repr(self) -> str:
        return f"r={self.r}, alpha={self.alpha}, scale={self.scale:g}, merged={self.merged}"


def check_rank(r, layer: nn.Linear, name: str = "layer") -> None:
    """Refuse a rank the layer cannot have: r must be an integer in 1 ... min(in, out)."""
    top = min(layer.in_features, layer.out_features)
    if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= top:
        raise ValueError(
            f"LoRA rank r={r!r} does not fit {name} ({layer.in_features} -> {layer.out_features}); "
            f"use an integer from 1 to {top}"
        )


def matches(name: str, targets) -> bool:
    """Whether a module's dotted name is one of ``targets`` or ends with ``.target`` (PEFT's rule)."""
    return any(name == t or name.endswith("." + t) for t in targets)


def apply_lora(model: nn.Module, r: int, alpha: float, targets=DEFAULT_TARGETS) -> list[str]:
    """Wrap every ``nn.Linear`` whose name matches ``targets`` in a :class:`LoRALinear`; freeze the rest.

    Returns the wrapped layers' names.  After this only the adapters'
    A and B have ``requires_grad``.
    """
    targets = (targets,) if isinstance(targets, str) else tuple(targets)
    linears = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    chosen = [n for n in linears if matches(n, targets)]
    if not chosen:
        raise ValueError(
            f"no linear layer matches LoRA targets {list(targets)}; this model's are named like "
            f"{', '.join(sorted({n.split('.', 2)[-1] for n in linears})[:6])}"
        )
    for n in chosen:  # check every rank first, so a bad one leaves the model untouched
        check_rank(r, model.get_submodule(n), n)
    for p in model.parameters():
        p.requires_grad_(False)
    for n in chosen:
        parent, _, leaf = n.rpartition(".")
        holder = model.get_submodule(parent) if parent else model
        setattr(holder, leaf, LoRALinear(getattr(holder, leaf), r, alpha, name=n))
    return chosen


def lora_layers(model: nn.Module) -> dict[str, LoRALinear]:
    """The model's LoRA layers by name."""
    return {n: m for n, m in model.named_modules() if isinstance(m, LoRALinear)}


def merge_lora(model: nn.Module) -> None:
    """Fold every adapter into its frozen weight (:meth:`LoRALinear.merge`)."""
    for layer in lora_layers(model).values():
        layer.merge()


def unmerge_lora(model: nn.Module) -> None:
    """Take every adapter back out of its frozen weight (:meth:`LoRALinear.unmerge`)."""
    for layer in lora_layers(model).values():
        layer.unmerge()


def unload_lora(model: nn.Module) -> list[str]:
    """Merge, then put the plain ``nn.Linear`` back where each adapter was: the model the checkpoint loader knows.

    Every parameter trains again afterwards (as in a freshly built model).
    Returns the names of the layers that were unloaded.
    """
    names = list(lora_layers(model))
    for n in names:
        layer = model.get_submodule(n)
        layer.merge()
        parent, _, leaf = n.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, layer.base)
    for p in model.parameters():
        p.requires_grad_(True)
    return names


def lora_parameter_count(model: nn.Module) -> dict[str, int]:
    """Parameters that train (the adapters), that stay frozen, and their tensors (A and B count two each)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    frozen = [p for p in model.parameters() if not p.requires_grad]
    return {
        "trainable": sum(p.numel() for p in trainable),
        "frozen": sum(p.numel() for p in frozen),
        "trainable_tensors": len(trainable),
    }


def lora_memory(
    model: nn.Module, *, precision: str = "fp32", optimizer: str = "adamw", base_bytes=None
) -> MemoryBreakdown:
    """Bytes of a LoRA fine-tune's weights, gradients and optimizer states, by :func:`gputrain.memory.finetune_memory`.

    ``base_bytes``: bytes per frozen weight if the base is stored in another
    format (0.5 for an int4 base, QLoRA-style); by default the recipe's.
    """
    counts = lora_parameter_count(model)
    return finetune_memory(
        counts["trainable"] + counts["frozen"],
        counts["trainable"],
        trainable_tensors=counts["trainable_tensors"],
        precision=precision,
        optimizer=optimizer,
        base_bytes=base_bytes,
    )

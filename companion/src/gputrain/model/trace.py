"""Looking inside a forward pass: every module's input and output shapes, in call order (chapter 2)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from .mlp import Activation


@dataclass
class ShapeRecord:
    """One module call seen during a forward pass."""

    name: str  # dotted path inside the model ("blocks.0.attn")
    kind: str  # the module's class name
    inputs: list[tuple[int, ...]]  # shapes of the tensor inputs
    output: tuple[int, ...]  # shape of the (first) tensor output


def trace_shapes(model: nn.Module, *inputs, max_depth: int | None = None) -> list[ShapeRecord]:
    """Run ``model(*inputs)`` and record every module's input and output shapes, in call order.

    Forward hooks see each call; ``max_depth`` keeps only names with at most
    that many dots plus one (1: direct children).  The hooks are removed again.
    """
    records: list[ShapeRecord] = []
    pending: dict[int, ShapeRecord] = {}
    handles = []

    def shapes(obj) -> list[tuple[int, ...]]:
        leaves = obj if isinstance(obj, (tuple, list)) else [obj]
        return [tuple(t.shape) for t in leaves if isinstance(t, torch.Tensor)]

    def pre(name):
        def hook(mod, args):
            kind = f"Activation({mod.name})" if isinstance(mod, Activation) else type(mod).__name__
            rec = ShapeRecord(name, kind, shapes(args), ())
            records.append(rec)
            pending[id(mod)] = rec

        return hook

    def post(mod, args, out):
        found = shapes(out)
        pending.pop(id(mod)).output = found[0] if found else ()

    for name, mod in model.named_modules():
        if not name or (max_depth is not None and name.count(".") + 1 > max_depth):
            continue
        handles += [mod.register_forward_pre_hook(pre(name)), mod.register_forward_hook(post)]
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for h in handles:
            h.remove()
    return records

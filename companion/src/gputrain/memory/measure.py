"""Measuring what a training step really allocates, on any device (chapter 7).

:func:`measure_step` runs one step and returns the same components that
:func:`~gputrain.memory.estimate` predicts: it counts the storages autograd
saves (:func:`saved_tensors`) and, with :class:`AllocationTracker`, the peak
of everything allocated, a CPU stand-in for ``torch.cuda.max_memory_allocated``.
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager
from typing import Iterable, Optional

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def _storages(tensors: Iterable[torch.Tensor]) -> dict[int, int]:
    """Distinct storages (data pointer -> bytes): views and shared buffers count once."""
    out: dict[int, int] = {}
    for t in tensors:
        st = t.untyped_storage()
        out[st.data_ptr()] = st.nbytes()
    return out


@contextmanager
def saved_tensors(exclude: Iterable[torch.Tensor] = ()):
    """Record the distinct storages autograd saves for backward inside the block.

    Yields a dict (data pointer -> bytes) filled as the forward runs.
    Storages of ``exclude`` (pass the parameters) are left out: they exist
    anyway.  q, k and v, which are views of one buffer, count once.
    """
    skip = set(_storages(exclude))
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        if st.data_ptr() not in skip:
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield seen


class AllocationTracker(TorchDispatchMode):
    """Live and peak bytes of the tensor storages created while it is active.

    A CPU stand-in for ``torch.cuda.max_memory_allocated`` (it works on any
    device): every operator's fresh outputs are counted when created and
    uncounted when their storage is freed.  Tensors that existed before
    (parameters, optimizer states) are not counted.
    """

    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0
        self._sizes: dict[int, int] = {}

    def _free(self, key: int) -> None:
        self.live -= self._sizes.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {
            t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)
        }
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            st = t.untyped_storage()
            key, size = st.data_ptr(), st.nbytes()
            if key in inputs or key in self._sizes or size == 0:  # a view or in-place result
                continue
            self._sizes[key] = size
            self.live += size
            weakref.finalize(st, self._free, key)  # fires when the storage itself dies
        self.peak = max(self.peak, self.live)
        return out


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind ``tensors``."""
    return sum(_storages(tensors).values())


def _state_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every tensor an optimizer keeps in its state (Adam's m, v and step)."""
    return [t for st in optimizer.state.values() for t in st.values() if isinstance(t, torch.Tensor)]


def held_bytes(model: nn.Module, optimizer) -> int:
    """Bytes a training run holds between steps: parameters, master weights and optimizer states.

    ``optimizer`` is a torch optimizer or a :class:`gputrain.precision.MasterWeights`.
    """
    torch_optimizer = getattr(optimizer, "optimizer", optimizer)
    masters = list(getattr(optimizer, "master_params", []))
    return tensor_bytes(list(model.parameters()) + masters + _state_tensors(torch_optimizer))


def measure_step(
    model: nn.Module, optimizer, x: torch.Tensor, y: torch.Tensor, autocast_dtype: Optional[torch.dtype] = None
) -> dict[str, int]:
    """Measure one training step of ``model`` (called as ``model(x, y) -> (logits, loss)``), in bytes.

    ``optimizer`` is a torch optimizer or a :class:`gputrain.precision.MasterWeights`.
    Returns parameters, gradients, master weights and optimizer states as held
    after the step, activations as the storages saved for backward, and
    ``peak``: the most allocated at once, counting everything that existed
    before the step too (params, master weights, optimizer states).
    """
    params = list(model.parameters())
    masters = list(getattr(optimizer, "master_params", []))
    torch_optimizer = getattr(optimizer, "optimizer", optimizer)
    optimizer.zero_grad(set_to_none=True)
    before = held_bytes(model, optimizer)
    with AllocationTracker() as tracker:
        with torch.autocast(x.device.type, dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
            with saved_tensors(exclude=params) as saved:
                _, loss = model(x, y)
        activations = sum(saved.values())
        loss.backward()
        gradients = tensor_bytes(p.grad for p in params if p.grad is not None)
        optimizer.step()
    return {
        "parameters": tensor_bytes(params),
        "gradients": gradients,
        "master_weights": tensor_bytes(masters),
        "optimizer_states": tensor_bytes(_state_tensors(torch_optimizer)),
        "activations": activations,
        "peak": before + tracker.peak,
    }

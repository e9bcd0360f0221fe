"""Looking inside torch's own autograd: what backward keeps, and what reaches each layer (chapter 4).

:func:`saved_activation_bytes` counts the bytes torch saves for the backward
pass; :class:`DeepMLP` records the gradient that reaches every depth of a deep
network, for vanishing and exploding gradients.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Optional

import torch

from ..model import Activation


def saved_activation_bytes(fn: Callable[[], object], exclude: Iterable[torch.Tensor] = ()) -> int:
    """Bytes of the distinct tensors torch's autograd saves for the backward pass while ``fn()`` runs.

    Every tensor a backward formula will need passes through the pack hook of
    ``torch.autograd.graph.saved_tensors_hooks``.  Each storage counts once
    (a ReLU's output and the next layer's input are one tensor in memory) and
    the storages of ``exclude`` (pass the parameters: they exist anyway) not at all.
    """
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in skip:
            saved[ptr] = t.untyped_storage().nbytes()
        return t  # keep it as it is: we only look

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(saved.values())


class DeepMLP(torch.nn.Module):
    """``depth`` hidden layers of one width, plain ``h = f(W h + b)`` or residual ``h = h + f(W h + b)``.

    Chapter 4 uses it for vanishing and exploding gradients.  The forward pass
    keeps each hidden state (with ``retain_grad``) so that after ``backward``,
    :meth:`signal_norms` gives the norm of dL/dh at every depth: the backward
    signal each layer receives.  ``init_gain=None`` keeps PyTorch's default
    initialization; a number draws weights from N(0, gain^2 * 2 / fan_in)
    (He initialization times ``gain``) and zeroes the biases.
    """

    def __init__(
        self,
        n_in: int,
        n_out: int,
        *,
        width: int = 64,
        depth: int = 20,
        activation: str = "sigmoid",
        residual: bool = False,
        init_gain: Optional[float] = None,
    ):
        super().__init__()
        if depth < 1 or width < 1:
            raise ValueError(f"DeepMLP needs depth >= 1 and width >= 1, got depth={depth}, width={width}")
        self.residual = residual
        self.inp = torch.nn.Linear(n_in, width)
        self.hidden = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))
        self.out = torch.nn.Linear(width, n_out)
        self.act = Activation(activation)
        self.states: list[torch.Tensor] = []
        if init_gain is not None:
            for lin in (self.inp, *self.hidden, self.out):
                torch.nn.init.normal_(lin.weight, std=init_gain * math.sqrt(2 / lin.in_features))
                torch.nn.init.zeros_(lin.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.inp(x))  # (N, width)
        self.states = [h]
        for lin in self.hidden:
            # the residual path adds the layer's input back: dh_out/dh_in = I + (layer's Jacobian)
            h = h + self.act(lin(h)) if self.residual else self.act(lin(h))  # (N, width)
            self.states.append(h)
        if torch.is_grad_enabled():
            for s in self.states:
                s.retain_grad()
        return self.out(h)  # (N, n_out)

    def linears(self) -> list[torch.nn.Linear]:
        return [self.inp, *self.hidden, self.out]

    def signal_norms(self) -> list[float]:
        """||dL/dh|| for each hidden state, input side first (after a backward pass)."""
        if not self.states or self.states[0].grad is None:
            raise RuntimeError("signal_norms() needs a forward and a backward pass first")
        return [s.grad.norm().item() for s in self.states]

    def weight_grad_norms(self) -> list[float]:
        """||dL/dW|| for each linear layer, input side first (after a backward pass)."""
        return [lin.weight.grad.norm().item() for lin in self.linears()]

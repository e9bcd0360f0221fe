"""Optimizers from scratch: SGD, momentum (heavy ball and Nesterov), RMSprop, Adam, AdamW, Lion, Muon.

Chapter 5 ("Optimizers and learning rate") explains them.  Each class is a
real :class:`torch.optim.Optimizer`, so it works with ``LambdaLR``, state
dicts, hooks and any training loop; only the update rule is written out here,
one readable line per equation.  ``tests/test_optim.py`` runs each one next to
its ``torch.optim`` counterpart for 50 steps and requires the parameters to
agree within 1e-6 at every step.

Notation in the docstrings: parameters $w$, gradient $g_t$ of the loss at step
$t$ (plus $\\lambda w$ when weight decay $\\lambda$ is coupled into it),
learning rate $\\eta$.  Parameters whose ``.grad`` is ``None`` are skipped and
get no state, as in PyTorch.

The state each optimizer keeps per parameter is named as in PyTorch
(``momentum_buffer``, ``square_avg``, ``exp_avg``, ``exp_avg_sq``), so a
state dict saved by ``torch.optim`` loads here and continues identically.

One optimizer family per module.  Imports go one way, down this list: a
module may import those above it, never one below::

    base      argument checks, the (parameter, gradient) walk, state_bytes
       |
    sgd       SGD, Momentum (heavy ball, Nesterov)
    adaptive  RMSprop, Adam, AdamW
       |
    muon      newton_schulz, uses_muon, Muon                (its AdamW half from adaptive)
    lion      Lion
    surfaces  descend, steps_to: runs on small surfaces     (imports no sibling)

Every name is re-exported here, so ``from gputrain.optim import AdamW`` works
as it always did.
"""

from .adaptive import Adam, AdamW, RMSprop
from .base import Params, state_bytes
from .lion import Lion
from .muon import MUON_LR_ADJUSTMENTS, NS_COEFFICIENTS, Muon, newton_schulz, newton_schulz_flops, uses_muon
from .sgd import SGD, Momentum
from .surfaces import descend, steps_to

__all__ = [
    # base
    "Params",
    "state_bytes",
    # sgd
    "SGD",
    "Momentum",
    # adaptive
    "RMSprop",
    "Adam",
    "AdamW",
    # muon
    "NS_COEFFICIENTS",
    "newton_schulz_flops",
    "newton_schulz",
    "uses_muon",
    "Muon",
    "MUON_LR_ADJUSTMENTS",
    # lion
    "Lion",
    # surfaces
    "descend",
    "steps_to",
]

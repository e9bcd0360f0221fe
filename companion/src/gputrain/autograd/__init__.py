"""A reverse-mode automatic differentiation engine, from scratch (chapter 4).

Every :class:`Tensor` remembers the tensors it was computed from and a small
function that turns the gradient of its output into the gradients of its
inputs (a vector-Jacobian product).  :meth:`Tensor.backward` orders the graph
topologically and walks it from the loss back to the leaves, applying the
chain rule once per node and *adding* the contributions of every path into a
node that is used more than once.

The numbers live in a ``torch.Tensor`` (so the same engine runs on a GPU) but
torch's own autograd is never used: every derivative is written out by hand in
the table of operations :mod:`gputrain.autograd.ops`, and
``tests/test_autograd.py`` checks each one against ``torch.autograd`` and
against central finite differences.

GELU comes in both forms: the exact ``x * Phi(x)`` with the Gaussian CDF
(``approximate="none"``, PyTorch's default) and the tanh approximation of
Hendrycks & Gimpel (``approximate="tanh"``, GPT-2's choice); each matches
``torch.nn.functional.gelu`` with the same ``approximate=`` setting.

One mechanism per module.  Imports go one way, down this list: a module may
import those above it, never one below::

    ops           the table: each operation's value and derivative rule (torch numbers only)
       |
    tensor        Tensor, its graph and backward(); topological_order, unbroadcast
       |
    functional    exp, relu, ..., cross_entropy, zero_grad as functions
       |
    mlp           MLP, sgd_step, train_digits on the digits   (imports gputrain.data)
    inside_torch  saved_activation_bytes, DeepMLP: torch's own autograd   (imports gputrain.model)

Every name is re-exported here (the rules stay in ``ops``, whose names they
share), so ``from gputrain.autograd import Tensor`` and ``gputrain.autograd.MLP``
work as they always did.
"""

from . import ops
from .functional import cross_entropy, exp, gelu, log, log_softmax, relu, sigmoid, softmax, tanh, zero_grad
from .inside_torch import DeepMLP, saved_activation_bytes
from .mlp import ACTIVATIONS, MLP, DigitsRun, accuracy, digits_split, sgd_step, train_digits
from .ops import Axis, Grads
from .tensor import Tensor, as_tensor, topological_order, unbroadcast

__all__ = [
    # ops (the rules themselves are gputrain.autograd.ops.mul, ...)
    "ops",
    "Grads",
    "Axis",
    # tensor
    "Tensor",
    "topological_order",
    "as_tensor",
    "unbroadcast",
    # functional
    "exp",
    "log",
    "tanh",
    "sigmoid",
    "relu",
    "gelu",
    "softmax",
    "log_softmax",
    "cross_entropy",
    "zero_grad",
    # mlp
    "ACTIVATIONS",
    "MLP",
    "sgd_step",
    "accuracy",
    "digits_split",
    "DigitsRun",
    "train_digits",
    # inside_torch
    "saved_activation_bytes",
    "DeepMLP",
]

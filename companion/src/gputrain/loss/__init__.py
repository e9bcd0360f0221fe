"""Loss functions written from scratch (chapter 3).

The loss turns a prediction and the right answer into one number: how far away
the model is, right now, on this example.  Everything here is checked against
PyTorch in ``tests/test_loss.py``:

* :func:`cross_entropy` equals ``F.cross_entropy`` (class indices or
  probabilities, ``ignore_index``, label smoothing, every reduction), built on a
  stable :func:`log_softmax` (the log-sum-exp trick), so logits of +-1e4 in
  float32 are fine;
* :func:`naive_softmax` / :func:`naive_cross_entropy` are the textbook formula,
  kept only to show where it overflows;
* :func:`mse_loss` equals ``F.mse_loss``;
* :func:`chunked_cross_entropy` computes the language-model loss from the final
  hidden states and the output head without ever holding the full B x T x V
  float32 logits, with the same value and gradients as the naive path.

Shapes: N = rows (B*T tokens), C = width, V = vocabulary (number of classes).

One mechanism per module.  Imports go one way, down this list: a module may
import those above it, never one below::

    softmax   naive_softmax, the stable logsumexp and log_softmax
       |
    losses    cross_entropy, mse_loss, perplexity, the reductions
       |
    chunked   chunked_cross_entropy and the naive head it matches
       |
    measure   peak_memory, compare_head_memory         (imports gputrain.device)

Every name is re-exported here, so ``from gputrain.loss import cross_entropy``
and ``gputrain.loss.cross_entropy`` work as they always did.
"""

from .chunked import _ChunkedCrossEntropy as _ChunkedCrossEntropy  # shown by chapter 3
from .chunked import chunked_cross_entropy, logits_bytes, naive_head_cross_entropy
from .losses import REDUCTIONS, cross_entropy, mse_loss, perplexity
from .measure import compare_head_memory, peak_memory
from .softmax import _row_max as _row_max  # shown by chapter 3
from .softmax import log_softmax, logsumexp, naive_cross_entropy, naive_softmax

__all__ = [
    # softmax
    "naive_softmax",
    "naive_cross_entropy",
    "logsumexp",
    "log_softmax",
    # losses
    "REDUCTIONS",
    "cross_entropy",
    "mse_loss",
    "perplexity",
    # chunked
    "logits_bytes",
    "naive_head_cross_entropy",
    "chunked_cross_entropy",
    # measure
    "peak_memory",
    "compare_head_memory",
]

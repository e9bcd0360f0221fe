"""Models: the forward pass (chapter 2).

Single-device code only: precision, FP8 and parallelism are applied from the
outside by wrappers (:mod:`gputrain.memory`, :mod:`gputrain.fp8`,
:mod:`gputrain.parallel`).  Shapes use B = batch, T = sequence length,
C = embedding width, H = heads, V = vocabulary.

One mechanism per module.  Imports go one way, down this list: a module may
import those above it, never one below::

    config      GPTConfig, ATTENTIONS                       (imports gputrain.moe)
       |
    mlp         Activation, MLP: chapter 2's network and a block's feed-forward
    perceptron  Perceptron, best_linear_accuracy, collapse_linear  (imports mlp)
    cache       KVCache and each block's LayerCache
       |
    attention   CausalSelfAttention: SDPA or the Triton kernel, with a cache
       |
    blocks      Block: attention + MLP or MoE on the residual stream
       |
    gpt         GPT: embeddings, blocks, head, loss, sampling
    params      count_params, gpt_num_params                (imports config, gputrain.moe)
    trace       ShapeRecord, trace_shapes                   (imports mlp)

Every name is re-exported here, so ``from gputrain.model import GPT`` works
as it always did.
"""

from .attention import CausalSelfAttention
from .blocks import Block
from .cache import KVCache, LayerCache
from .config import ATTENTIONS, GPTConfig
from .gpt import GPT
from .mlp import ACTIVATIONS, MLP, Activation
from .params import count_params, gpt_num_params
from .perceptron import Perceptron, best_linear_accuracy, collapse_linear
from .trace import ShapeRecord, trace_shapes

__all__ = [
    # config
    "ATTENTIONS",
    "GPTConfig",
    # mlp
    "ACTIVATIONS",
    "Activation",
    "MLP",
    # perceptron
    "Perceptron",
    "best_linear_accuracy",
    "collapse_linear",
    # cache
    "LayerCache",
    "KVCache",
    # attention
    "CausalSelfAttention",
    # blocks
    "Block",
    # gpt
    "GPT",
    # params
    "count_params",
    "gpt_num_params",
    # trace
    "ShapeRecord",
    "trace_shapes",
]

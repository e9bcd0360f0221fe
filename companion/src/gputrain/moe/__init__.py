"""Mixture of experts in the DeepSeekMoE form: router, experts, load balancing (chapter 9).

A :class:`MoE` layer replaces a transformer block's feed-forward network with
many small *routed* experts, of which each token uses ``top_k``, plus
``n_shared`` *shared* experts that every token uses.  The router scores each
token against every routed expert in one of two ways:

* ``"softmax"`` (Switch Transformer, GShard): probabilities over all experts,
  the top k kept with their probabilities as gates (not renormalized);
* ``"sigmoid"`` (DeepSeek-V3): an independent affinity in (0, 1) per expert,
  the top k renormalized to sum to 1, times ``routed_scaling``.

Optional node-limited routing (DeepSeek-V3) splits the experts into
``n_groups`` groups (standing for nodes) and lets each token use experts of at
most ``topk_groups`` groups, chosen by the sum of each group's highest
``top_k // topk_groups`` affinities.

Load balancing is ``"none"``, ``"aux"`` (the Switch auxiliary loss
``alpha * E * sum_i f_i P_i``, left in ``layer.aux_loss`` for the model to add)
or ``"bias"`` (DeepSeek-V3's auxiliary-loss-free balancing: a per-expert bias,
a buffer, added to the scores only to *choose* experts; the training loop
calls :func:`update_router_biases` after each optimizer step to move it by
``+gamma`` for under-loaded and ``-gamma`` for over-loaded experts).

``capacity_factor=None`` is dropless; a positive number caps each expert at
``ceil(capacity_factor * tokens * top_k / n_experts)`` assignments per forward,
and the assignments past the cap (in token order) are dropped and counted.

One mechanism per module.  Imports go one way, down this list: a module may
import those above it, never one below.  None imports the rest of
:mod:`gputrain`; :mod:`gputrain.model` builds its MoE blocks from them::

    config   MoEConfig, ROUTERS, BALANCES
       |
    experts  Expert, apply_capacity, run_experts           (imports no sibling)
    router   Routing, Router, balance_loss
       |
    layer    MoE: route, dispatch, combine; its balancing bias
       |
    balance  update_router_biases, aux_loss, expert_loads over a whole model
    params   count_moe_params, moe_layer_params, DeepSeek-V3's counts

Every name is re-exported here, so ``from gputrain.moe import MoE`` works as
it always did.
"""

from .balance import aux_loss, expert_loads, update_router_biases
from .config import BALANCES, ROUTERS, MoEConfig
from .experts import Expert, apply_capacity, run_experts
from .layer import MoE
from .params import DEEPSEEK_V3, count_moe_params, deepseek_v3_params, moe_layer_params
from .router import Router, Routing, balance_loss

__all__ = [
    # config
    "ROUTERS",
    "BALANCES",
    "MoEConfig",
    # experts
    "Expert",
    "apply_capacity",
    "run_experts",
    # router
    "Routing",
    "Router",
    "balance_loss",
    # layer
    "MoE",
    # balance
    "update_router_biases",
    "aux_loss",
    "expert_loads",
    # params
    "count_moe_params",
    "moe_layer_params",
    "DEEPSEEK_V3",
    "deepseek_v3_params",
]

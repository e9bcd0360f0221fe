"""Where training memory goes, and how to get it back (chapter 7; experts, chapter 9).

* :func:`estimate` predicts the bytes of parameters, gradients, master
  weights, optimizer states and activations for a GPT-style model under a
  precision recipe, an optimizer, activation checkpointing and a ZeRO stage.
* :func:`measure_step` and :class:`AllocationTracker` measure the same
  components of a real training step, so the two can be compared.
* :func:`apply_activation_checkpointing` trades compute for memory from the
  outside: the model's code is unchanged.
* :func:`finetune_memory` gives the same components when only some weights
  train (LoRA's adapters; chapter 12), with the frozen ones in any format.
* :func:`expert_parallel_memory` gives the bytes per GPU of a mixture-of-experts
  model whose experts are split over expert-parallel ranks.
* :func:`stage_memory` gives the bytes of a post-training stage (SFT, DPO,
  GRPO, PPO: which models it holds, trained or frozen, and the rollouts' KV
  cache) against an H100's and an H200's memory (chapter 13).

One concern per module.  Imports go one way, down this list: a module may
import those above it, never one below::

    recipes        the precision recipe table RECIPES, optimizer states
       |
    shapes         ModelShape, shape_of, the KV cache          (imports gputrain.model)
       |
    activations    Korthikanti et al.'s formula, our GPT's saved tensors
       |
    estimate       estimate() and its MemoryBreakdown
    finetune       finetune_memory, LoRA and frozen weights     (imports estimate)
    measure        measure_step, AllocationTracker             (imports no sibling)
    checkpointing  apply_activation_checkpointing              (imports gputrain.model)
    experts        MoEShape, expert_parallel_memory            (imports recipes, gputrain.moe)
    stages         stage_memory: SFT, DPO, GRPO, PPO on one GPU (imports estimate, gputrain.device)

Every name is re-exported here, so ``from gputrain.memory import estimate``
works as it always did.  ``gputrain.memory.estimate`` is the function; the
module of the same name is ``importlib.import_module("gputrain.memory.estimate")``.
"""

from .activations import (
    ACTIVATION_MODELS,
    gpt_activations,
    gpt_layer_activations,
    korthikanti_activations,
    recomputed_block_bytes,
)
from .checkpointing import apply_activation_checkpointing, is_checkpointed, remove_activation_checkpointing
from .estimate import COMPONENTS, MemoryBreakdown, estimate
from .experts import MoEShape, deepseek_v3_shape, expert_parallel_memory, moe_shape, stage_params
from .finetune import finetune_memory
from .measure import AllocationTracker, held_bytes, measure_step, saved_tensors, tensor_bytes
from .recipes import OPTIMIZER_STATES, RECIPES, PrecisionRecipe, get_recipe, optimizer_states
from .shapes import GPT2_SMALL, GPT3_175B, ModelShape, kv_cache_bytes, shape_of
from .stages import (
    LLAMA3_70B,
    LLAMA_7B,
    ROLLOUT_BATCH,
    STAGE_GPUS,
    STAGE_MODELS,
    STAGE_SEQ_LEN,
    STAGES,
    StageMemory,
    stage_memory,
)

__all__ = [
    # recipes
    "PrecisionRecipe",
    "RECIPES",
    "OPTIMIZER_STATES",
    "optimizer_states",
    "get_recipe",
    # shapes
    "ModelShape",
    "GPT2_SMALL",
    "GPT3_175B",
    "shape_of",
    "kv_cache_bytes",
    # activations
    "ACTIVATION_MODELS",
    "korthikanti_activations",
    "gpt_layer_activations",
    "gpt_activations",
    "recomputed_block_bytes",
    # estimate
    "COMPONENTS",
    "MemoryBreakdown",
    "estimate",
    # finetune
    "finetune_memory",
    # measure
    "saved_tensors",
    "AllocationTracker",
    "tensor_bytes",
    "held_bytes",
    "measure_step",
    # checkpointing
    "apply_activation_checkpointing",
    "remove_activation_checkpointing",
    "is_checkpointed",
    # experts
    "MoEShape",
    "moe_shape",
    "deepseek_v3_shape",
    "stage_params",
    "expert_parallel_memory",
    # stages
    "STAGES",
    "LLAMA_7B",
    "LLAMA3_70B",
    "STAGE_MODELS",
    "STAGE_GPUS",
    "STAGE_SEQ_LEN",
    "ROLLOUT_BATCH",
    "StageMemory",
    "stage_memory",
]

"""Memory per post-training stage: which models each holds, trained or frozen, and the rollouts' KV cache (chapter 13).

After pretraining, each stage holds more than one model on the GPU:

* SFT trains the policy;
* DPO trains the policy and reads a frozen reference (the log-probs of
  each chosen and rejected reply under the starting model);
* GRPO trains the policy, reads a frozen reference (the KL term), and
  samples rollouts, whose KV cache holds every sequence's keys and values;
* PPO trains the policy and a value model, reads a frozen reference and a
  frozen reward model, and samples rollouts.

A trained model costs what :func:`~gputrain.memory.estimate` says: weights,
master weights and optimizer states for the whole run, then gradients and
activations while it learns.  A frozen one costs its weights alone (its
forward runs without gradient, so it keeps no activations).  The two phases
of an RL step do not overlap: the KV cache is freed before the learner runs
(and gradients are freed before the next rollout), so the peak is what is
held throughout plus the larger phase; :attr:`StageMemory.total` is the sum
for a setup that frees nothing.

Assumptions, each a parameter: the value and reward models have the policy's
shape (InstructGPT used a smaller reward model; TRL's PPO starts the value
model from the reward model); one precision recipe for every model, frozen
weights in its weight format; activations by Korthikanti et al.'s formula
(a GPT-style block: Llama's SwiGLU MLP differs a little); one GPU, no ZeRO.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..device import GPU_SPECS
from .estimate import estimate
from .recipes import get_recipe
from .shapes import GPT2_SMALL, ModelShape, _check_sizes, kv_cache_bytes

# which models each stage holds: trained ones keep gradients, master weights and optimizer states
STAGES = {
    "sft": {"trained": ("policy",), "frozen": (), "rollouts": False},
    "dpo": {"trained": ("policy",), "frozen": ("reference",), "rollouts": False},
    "grpo": {"trained": ("policy",), "frozen": ("reference",), "rollouts": True},
    "ppo": {"trained": ("policy", "value"), "frozen": ("reference", "reward"), "rollouts": True},
}
# GPT-style shapes of three sizes: GPT-2 small; LLaMA 7B (touvron2023, table 2: 6.7B parameters, 32 layers of
# 4096, 32 heads, 32,000 tokens, 2,048 context); Llama 3 70B (dubey2024, table 3: 80 layers of 8192, 64 heads
# of which 8 keep keys and values, 128,000 tokens, 8,192 context)
LLAMA_7B = ModelShape(32, 4096, 32, 32000, 2048, params_override=6.7e9, bias=False)
LLAMA3_70B = ModelShape(80, 8192, 64, 128000, 8192, params_override=70e9, bias=False, kv_heads=8)
STAGE_MODELS = {"gpt2-small": GPT2_SMALL, "7b": LLAMA_7B, "70b": LLAMA3_70B}
STAGE_GPUS = ("H100", "H200")
STAGE_SEQ_LEN = 1024  # prompt and reply tokens per sequence, unless the model's context is shorter
ROLLOUT_BATCH = 64  # sequences sampled at once: 8 prompts x a group of 8


@dataclass
class StageMemory:
    """Bytes on one GPU of one post-training stage, by model and phase."""

    stage: str
    model: str
    resident: dict[str, float]  # held through the step: trained models' weights and states, frozen weights
    learning: dict[str, float]  # above ``resident`` while the learner runs: gradients and activations
    rollout: dict[str, float]  # above ``resident`` while sampling: the KV cache
    settings: dict[str, object] = field(default_factory=dict)

    @property
    def peak(self) -> float:
        """Held throughout, plus the larger of the two phases (the KV cache is freed before learning)."""
        return sum(self.resident.values()) + max(sum(self.learning.values()), sum(self.rollout.values()))

    @property
    def total(self) -> float:
        """Everything at once: a setup that keeps the KV cache while it learns."""
        return sum(self.resident.values()) + sum(self.learning.values()) + sum(self.rollout.values())

    def fits(self, gpu: str) -> bool:
        """Whether the peak fits in one ``gpu``'s HBM (:data:`gputrain.device.GPU_SPECS`)."""
        return self.peak <= GPU_SPECS[gpu].hbm_bytes

    def rows(self) -> list[tuple[str, float]]:
        """(what, bytes) for a table: each resident part, each phase's parts, the peak and the total."""
        out = [(name, b) for name, b in self.resident.items()]
        out += [(name, b) for name, b in self.learning.items()] + [(name, b) for name, b in self.rollout.items()]
        return out + [("peak", self.peak), ("total (nothing freed)", self.total)]


def _check_stage(stage: str, model: str, seq_len: int, batch_size: int, rollout_batch: int) -> ModelShape:
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; use one of: {', '.join(STAGES)}")
    if model not in STAGE_MODELS:
        raise ValueError(f"unknown model {model!r} for a stage; use one of: {', '.join(STAGE_MODELS)}")
    for name, value in (("batch_size", batch_size), ("seq_len", seq_len), ("rollout_batch", rollout_batch)):
        if not (isinstance(value, int) and value >= 1):
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    shape = STAGE_MODELS[model]
    if seq_len > shape.block_size:
        raise ValueError(f"seq_len {seq_len} exceeds the context of {model} ({shape.block_size} tokens)")
    return shape


def stage_memory(
    stage: str,
    model: str,
    *,
    batch_size: int = 1,
    seq_len: int | None = None,
    rollout_batch: int = ROLLOUT_BATCH,
    precision: str = "bf16-mixed",
    optimizer: str = "adamw",
    activation_checkpointing: bool = False,
) -> StageMemory:
    """Bytes on one GPU of ``stage`` ("sft", "dpo", "grpo", "ppo") for ``model`` (a key of :data:`STAGE_MODELS`).

    ``batch_size``: sequences per learner micro-batch (DPO: pairs, so twice
    the sequences); ``seq_len``: prompt and reply tokens per sequence
    (default :data:`STAGE_SEQ_LEN`, or the context if shorter);
    ``rollout_batch``: sequences sampled at once (GRPO: prompts x group
    size), whose KV cache holds ``seq_len`` tokens each in the recipe's
    activation format.
    """
    shape = STAGE_MODELS.get(model)
    seq_len = min(STAGE_SEQ_LEN, shape.block_size) if seq_len is None and shape else seq_len
    shape = _check_stage(stage, model, seq_len, batch_size, rollout_batch)
    recipe, plan = get_recipe(precision), STAGES[stage]
    sequences = 2 * batch_size if stage == "dpo" else batch_size
    trained = estimate(
        shape,
        batch_size=sequences,
        seq_len=seq_len,
        precision=recipe,
        optimizer=optimizer,
        activation_checkpointing=activation_checkpointing,
        activation_model="korthikanti",
    )
    resident = {f"{m}: weights, master weights, optimizer states": trained.static for m in plan["trained"]}
    resident |= {f"{m}: weights (frozen)": shape.params * recipe.weights for m in plan["frozen"]}
    learning = {f"{m}: gradients and activations": trained.peak - trained.static for m in plan["trained"]}
    rollout = {}
    if plan["rollouts"]:
        _check_sizes(rollout_batch=rollout_batch)
        rollout["rollouts: KV cache"] = kv_cache_bytes(shape, seq_len, rollout_batch, recipe.activations)
    settings = dict(
        precision=recipe.name,
        optimizer=optimizer,
        batch_size=batch_size,
        sequences_per_step=sequences,
        seq_len=seq_len,
        rollout_batch=rollout_batch if plan["rollouts"] else None,
        activation_checkpointing=activation_checkpointing,
        params=shape.params,
    )
    return StageMemory(stage, model, resident, learning, rollout, settings)

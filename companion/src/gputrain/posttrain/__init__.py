"""After pretraining: chat turns, LoRA and tasks with exact graders (chapter 12); losses from rewards (chapter 13).

* :class:`ChatFormat` writes a conversation with reserved role and
  end-of-turn tokens and masks the loss to the assistant's tokens;
  :func:`grow_vocab` gives a pretrained GPT the rows for the new tokens.
* :func:`apply_lora` wraps the GPT's linear layers in :class:`LoRALinear`
  (a frozen W plus a trainable (alpha / r) B A), checked against PEFT;
  :func:`merge_lora` folds the adapters in.
* :func:`finetune` runs supervised fine-tuning on the training loop itself
  (:func:`gputrain.train.train`): examples from JSONL
  (:mod:`~gputrain.posttrain.examples`), full or LoRA; :func:`load_chat_model`
  loads what it saved.
* :func:`problems` draws arithmetic and Python-expression problems whose
  replies :func:`grade` marks exactly; train and test never share a problem.
* :func:`generate_replies` answers many prompts at once with the KV cache,
  greedy or sampled, grouped by length so that no padding changes a reply.
* :func:`evaluate_task` scores a chat model, or a base model prompted with
  few-shot train examples: greedy accuracy (Wilson interval) and the unbiased
  :func:`pass_at_k` (bootstrap interval); :func:`combine_seeds` averages seeds.
* Learning from rewards, each loss written from scratch and checked against
  TRL's: :func:`reinforce_loss`, :func:`rloo_loss`, :func:`ppo_loss` with
  :func:`gae`; :func:`grpo_loss` with :func:`group_advantages` (TRL's
  ``loss_type`` and ``scale_rewards``); :func:`dpo_loss`; the KL estimators
  k1, k2, k3 against :func:`exact_kl` (:func:`estimator_stats`); and
  :data:`NAME_MAP`, what nanochat, MiniMind, CS336 and DeepSeekMath call GRPO
  in TRL's names.
* :func:`rollout` samples G replies per prompt with the KV cache and keeps
  each sampled token's log-prob, masks and the time;
  :func:`policy_logprobs` is the learner's teacher-forced pass over them.
  :func:`task_rewards` grades them; :func:`load_reward` and
  :func:`score_replies` run a user's ``module:function`` reward, checked.
  :func:`grpo_step_cost` counts a step's rollout and learner FLOPs and bytes
  for chapter 11's roofline.
* :func:`prefer` runs DPO on the training loop itself: preference pairs from
  JSONL, a policy beside its frozen reference (:class:`PreferenceModel`).
  :func:`train_reward_model` trains InstructGPT's Bradley-Terry
  :class:`RewardModel` on the same pairs; :func:`pairwise_accuracy` scores
  held-out pairs, :func:`as_reward` makes it a reward for PPO.
  :func:`reinforce` runs GRPO, RLOO or PPO (:data:`ALGOS`) on it too:
  :class:`GRPOModel`'s forward samples, grades (the task's grader or a
  user's reward) and returns the loss of one step; :class:`ValueModel` is
  PPO's critic, :class:`RolloutStore` keeps a rollout for ``num_iterations``
  steps, and :func:`step_record` what each step records (:data:`HISTORY_KEYS`).

One mechanism per module.  Imports go one way, down this list: a module may
import those above it, never one below::

    chat      ChatFormat, the loss mask, grow_vocab      (imports gputrain.data, gputrain.model)
    lora      LoRALinear, apply_lora, merge, counts      (imports gputrain.memory)
    tasks     Problem, problems, safe_eval, grade        (imports no sibling)
    examples  read_records, ChatExamples: padded (x, y)  (imports chat)
    sft       finetune, load_chat_model, chat_model      (imports gputrain.train, chat, examples, lora)
    generation  generate_replies, decode: batched, KV cache, log-probs  (imports gputrain.model)
    evaluate  pass@k, intervals, few-shot, evaluate_task  (imports gputrain.data, gputrain.model, generation)
    forgetting  text_bits_per_byte, energy_rank of updates  (imports gputrain.model, lora)
    kl  k1, k2, k3 estimators of KL(p || q), exact_kl, estimator_stats  (imports no sibling)
    policy_gradient  REINFORCE, RLOO, PPO-clip, GAE, normalisations  (imports no sibling)
    grpo  group_advantages, grpo_loss in TRL's names, completion log-probs  (imports kl, policy_gradient)
    dpo  the sigmoid DPO loss, sequence log-probs, implicit rewards  (imports no sibling)
    names  NAME_MAP: nanochat, MiniMind, CS336, DeepSeekMath in TRL's names  (imports grpo, policy_gradient)
    rollout  G samples per prompt, their log-probs, masks, time  (imports gputrain.model, generation, grpo)
    rewards  task_rewards, a user's module:function reward, checked  (imports tasks)
    rlcost  a GRPO step's rollout and learner FLOPs and bytes  (imports gputrain.memory, gputrain.roofline)
    preference  DPO on the training loop: pairs, PreferenceModel, prefer  (imports gputrain.train, chat, dpo, grpo, sft)
    reward_model  Bradley-Terry RM, accuracy, as_reward  (imports gputrain.train, chat, evaluate, preference, sft)
    value  PPO's value model: the policy's trunk, a zero scalar head  (imports gputrain.model, lora, rollout)
    rlalgos  GRPO, RLOO, PPO: advantages and loss of a scored rollout  (imports grpo, kl, policy_gradient)
    rlcycle  a scored rollout and its store for num_iterations steps  (imports rollout)
    rlstats  a step's record: reward, lengths, entropy, clip, KL, times  (imports no sibling)
    rlsettings  GRPOSettings: what a step does, in TRL's names  (imports grpo, rlalgos)
    rl  RL on the training loop: GRPOModel samples, grades, learns  (imports gputrain.train, sft, rl*, value)

Every name is re-exported here, so ``from gputrain.posttrain import apply_lora`` works.
"""

from .chat import (
    IGNORE,
    ROLES,
    SPECIAL_TOKENS,
    ChatFormat,
    Encoded,
    as_messages,
    check_messages,
    grow_vocab,
    masked_cross_entropy,
)
from .dpo import DPO_BETA, dpo_loss, implicit_rewards, sequence_logprob
from .evaluate import (
    CONFIDENCE,
    DEFAULT_KS,
    DEFAULT_SHOTS,
    NEWLINE,
    Estimate,
    TaskResult,
    bootstrap_means,
    combine_seeds,
    evaluate_task,
    few_shot_prompt,
    mean_interval,
    pass_at_k,
    prompt_ids,
    reply_text,
    t_quantile,
    wilson_interval,
)
from .examples import ChatExamples, encode_records, read_records, split_examples
from .forgetting import energy_rank, text_bits_per_byte, update_ranks, weight_updates
from .generation import (
    NOISE_BLOCK,
    check_prompts,
    check_sampling,
    choose,
    decode,
    generate_replies,
    sample_seed,
    sampling_logits,
)
from .grpo import (
    ADVANTAGE_EPS,
    LOSS_TYPES,
    SCALE_REWARDS,
    completion_logprobs,
    group_advantages,
    grpo_loss,
    token_logprobs,
)
from .kl import KL_ESTIMATORS, EstimatorStats, estimator_stats, exact_kl, kl_k1, kl_k2, kl_k3
from .lora import (
    DEFAULT_TARGETS,
    LoRALinear,
    apply_lora,
    check_rank,
    lora_layers,
    lora_memory,
    lora_parameter_count,
    matches,
    merge_lora,
    unload_lora,
    unmerge_lora,
)
from .names import NAME_MAP, anchor_advantages, anchor_loss
from .policy_gradient import (
    NORMALISATIONS,
    PPOLoss,
    aggregate,
    clip_fraction,
    clipped_surrogate,
    gae,
    group_view,
    leave_one_out_baseline,
    ppo_loss,
    reinforce_loss,
    rloo_loss,
    whiten,
)
from .preference import DPO_DEFAULTS, PreferenceModel, PreferencePairs, prefer, preference_data
from .reward_model import (
    RM_DEFAULTS,
    SCORE_BATCH,
    STAGE,
    RewardModel,
    as_reward,
    bradley_terry_loss,
    load_reward_model,
    pairwise_accuracy,
    reward_pairs,
    train_reward_model,
)
from .rewards import load_reward, score_replies, task_rewards
from .rl import RL_DEFAULTS, GRPOModel, ProblemIndices, reinforce
from .rlalgos import (
    ALGOS,
    NORMALISE_EPS,
    AlgoLoss,
    algo_advantages,
    algo_loss,
    mean_kl,
    ppo_advantages,
    ppo_token_rewards,
    rloo_advantages,
    rloo_clipped_loss,
    sequence_clip_mask,
)
from .rlcost import StepCost, forward_cost, grpo_step_cost, learner_cost, rollout_cost
from .rlcycle import RolloutStore, Scored
from .rlsettings import GRPOSettings
from .rlstats import HISTORY_KEYS, step_record
from .rollout import PAD, Rollout, check_rollout, policy_logprobs, rollout, teacher_forced
from .sft import (
    CHAT_FORMAT,
    LORA_LR,
    SFT_DEFAULTS,
    chat_data,
    chat_model,
    finetune,
    load_chat_model,
    model_from_config,
)
from .tasks import (
    ANSWER_PREFIX,
    TASKS,
    TEST_FRACTION,
    Problem,
    arithmetic_problem,
    final_answer,
    grade,
    problems,
    python_problem,
    safe_eval,
    split_of,
)
from .value import ValueModel

__all__ = [
    "ROLES", "SPECIAL_TOKENS", "IGNORE", "Encoded", "ChatFormat", "check_messages", "as_messages",
    "masked_cross_entropy", "grow_vocab",  # chat
    "DEFAULT_TARGETS", "LoRALinear", "check_rank", "matches", "apply_lora", "lora_layers", "merge_lora",
    "unmerge_lora", "unload_lora", "lora_parameter_count", "lora_memory",  # lora
    "TASKS", "TEST_FRACTION", "ANSWER_PREFIX", "Problem", "split_of", "final_answer", "grade",
    "arithmetic_problem", "safe_eval", "python_problem", "problems",  # tasks
    "read_records", "encode_records", "split_examples", "ChatExamples",  # examples
    "CHAT_FORMAT", "SFT_DEFAULTS", "LORA_LR", "chat_model", "model_from_config", "load_chat_model", "finetune",
    "chat_data",  # sft
    "NOISE_BLOCK", "sample_seed", "check_sampling", "generate_replies", "check_prompts", "decode", "sampling_logits",
    "choose",  # generation
    "DEFAULT_SHOTS", "DEFAULT_KS", "CONFIDENCE", "NEWLINE", "pass_at_k", "Estimate", "wilson_interval",
    "bootstrap_means", "t_quantile", "mean_interval", "few_shot_prompt", "prompt_ids", "reply_text", "TaskResult",
    "evaluate_task", "combine_seeds",  # evaluate
    "text_bits_per_byte", "weight_updates", "energy_rank", "update_ranks",  # forgetting
    "kl_k1", "kl_k2", "kl_k3", "KL_ESTIMATORS", "exact_kl", "EstimatorStats", "estimator_stats",  # kl
    "NORMALISATIONS", "aggregate", "reinforce_loss", "group_view", "leave_one_out_baseline", "rloo_loss",
    "clipped_surrogate", "clip_fraction", "gae", "whiten", "PPOLoss", "ppo_loss",  # policy_gradient
    "LOSS_TYPES", "SCALE_REWARDS", "ADVANTAGE_EPS", "group_advantages", "token_logprobs", "completion_logprobs",
    "grpo_loss",  # grpo
    "DPO_BETA", "sequence_logprob", "implicit_rewards", "dpo_loss",  # dpo
    "NAME_MAP", "anchor_advantages", "anchor_loss",  # names
    "PAD", "Rollout", "check_rollout", "rollout", "policy_logprobs", "teacher_forced",  # rollout
    "task_rewards", "load_reward", "score_replies",  # rewards
    "StepCost", "forward_cost", "rollout_cost", "learner_cost", "grpo_step_cost",  # rlcost
    "DPO_DEFAULTS", "PreferencePairs", "preference_data", "PreferenceModel", "prefer",  # preference
    "RM_DEFAULTS", "STAGE", "SCORE_BATCH", "bradley_terry_loss", "RewardModel", "reward_pairs", "train_reward_model",
    "load_reward_model", "pairwise_accuracy", "as_reward",  # reward_model
    "ValueModel",  # value
    "ALGOS", "NORMALISE_EPS", "rloo_advantages", "sequence_clip_mask", "rloo_clipped_loss", "ppo_token_rewards",
    "ppo_advantages", "algo_advantages", "AlgoLoss", "algo_loss", "mean_kl",  # rlalgos
    "Scored", "RolloutStore",  # rlcycle
    "HISTORY_KEYS", "step_record",  # rlstats
    "RL_DEFAULTS", "GRPOSettings", "ProblemIndices", "GRPOModel", "reinforce",  # rl
]  # fmt: skip

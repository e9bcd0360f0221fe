"""After pretraining: chat turns, LoRA and tasks with exact graders (chapter 12).

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

One mechanism per module.  Imports go one way, down this list: a module may
import those above it, never one below::

    chat      ChatFormat, the loss mask, grow_vocab      (imports gputrain.data, gputrain.model)
    lora      LoRALinear, apply_lora, merge, counts      (imports gputrain.memory)
    tasks     Problem, problems, safe_eval, grade        (imports no sibling)
    examples  read_records, ChatExamples: padded (x, y)  (imports chat)
    sft       finetune, load_chat_model, chat_model      (imports gputrain.train, chat, examples, lora)
    generation  generate_replies: batched, KV cache    (imports gputrain.model)
    evaluate  pass@k, intervals, few-shot, evaluate_task  (imports gputrain.data, gputrain.model, generation)
    forgetting  text_bits_per_byte, energy_rank of updates  (imports gputrain.model, lora)

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
from .generation import check_sampling, choose, generate_replies, sample_seed
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

__all__ = [
    # chat
    "ROLES",
    "SPECIAL_TOKENS",
    "IGNORE",
    "Encoded",
    "ChatFormat",
    "check_messages",
    "as_messages",
    "masked_cross_entropy",
    "grow_vocab",
    # lora
    "DEFAULT_TARGETS",
    "LoRALinear",
    "check_rank",
    "matches",
    "apply_lora",
    "lora_layers",
    "merge_lora",
    "unmerge_lora",
    "unload_lora",
    "lora_parameter_count",
    "lora_memory",
    # tasks
    "TASKS",
    "TEST_FRACTION",
    "ANSWER_PREFIX",
    "Problem",
    "split_of",
    "final_answer",
    "grade",
    "arithmetic_problem",
    "safe_eval",
    "python_problem",
    "problems",
    # examples
    "read_records",
    "encode_records",
    "split_examples",
    "ChatExamples",
    # sft
    "CHAT_FORMAT",
    "SFT_DEFAULTS",
    "LORA_LR",
    "chat_model",
    "model_from_config",
    "load_chat_model",
    "finetune",
    "chat_data",
    # generation
    "sample_seed",
    "check_sampling",
    "generate_replies",
    "choose",
    # evaluate
    "DEFAULT_SHOTS",
    "DEFAULT_KS",
    "CONFIDENCE",
    "NEWLINE",
    "pass_at_k",
    "Estimate",
    "wilson_interval",
    "bootstrap_means",
    "t_quantile",
    "mean_interval",
    "few_shot_prompt",
    "prompt_ids",
    "reply_text",
    "TaskResult",
    "evaluate_task",
    "combine_seeds",
    # forgetting
    "text_bits_per_byte",
    "weight_updates",
    "energy_rank",
    "update_ranks",
]

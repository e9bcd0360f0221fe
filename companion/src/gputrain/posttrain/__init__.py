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

One mechanism per module.  Imports go one way, down this list: a module may
import those above it, never one below::

    chat      ChatFormat, the loss mask, grow_vocab      (imports gputrain.data, gputrain.model)
    lora      LoRALinear, apply_lora, merge, counts      (imports gputrain.memory)
    tasks     Problem, problems, safe_eval, grade        (imports no sibling)
    examples  read_records, ChatExamples: padded (x, y)  (imports chat)
    sft       finetune, load_chat_model, chat_model      (imports gputrain.train, chat, examples, lora)

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
from .examples import ChatExamples, encode_records, read_records, split_examples
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
]

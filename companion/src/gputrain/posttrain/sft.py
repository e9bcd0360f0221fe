"""Supervised fine-tuning on the book's own training loop (chapter 12).

:func:`finetune` takes a pretrained checkpoint and chat examples and runs
:func:`gputrain.train.train` on them: the same Accelerate loop, checkpoints,
resume, log, directory lock and Ctrl-C/SIGTERM handling as pretraining, no
second loop.  What changes is the model and the data.  The model is the base
GPT with four reserved tokens added (:func:`~gputrain.posttrain.chat.grow_vocab`)
and, for LoRA, adapters on its linear layers with everything else frozen
(:func:`~gputrain.posttrain.lora.apply_lora`).  The data are conversations
padded to one length, whose targets count only the assistant's tokens
(:mod:`~gputrain.posttrain.examples`).

A fine-tuned checkpoint records the grown shape and its adapters in its
``model_config`` (under ``"posttrain"``), so :func:`load_chat_model` rebuilds
it with nothing but the checkpoint, and a resume rebuilds the same model
before the training loop loads the weights and the optimizer into it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import torch

from ..model import GPT, GPTConfig
from ..train import TrainConfig, TrainResult, load_model, read_checkpoint, train
from ..train.checkpoint import CheckpointError, check_compatible, load_weights
from ..train.resume import resume_config
from .chat import SPECIAL_TOKENS, ChatFormat, grow_vocab
from .examples import ChatExamples, encode_records, read_records, split_examples
from .lora import DEFAULT_TARGETS, apply_lora, unload_lora

CHAT_FORMAT = "gputrain-chat-1"  # the reserved tokens after the byte vocabulary, in SPECIAL_TOKENS' order

# Fine-tuning's defaults where they differ from pretraining's (TrainConfig): fewer steps, a short warmup,
# no weight decay (TRL's SFTConfig has none either: decay would pull the pretrained weights towards zero)
SFT_DEFAULTS = dict(
    lr=1e-3, max_steps=300, warmup_steps=10, weight_decay=0.0, batch_size=32, eval_interval=50, eval_batches=4
)
LORA_LR = 3e-3  # LoRA's default learning rate: its adapters start at zero and need a larger step (Hu et al.)


def _posttrain_info(lora_rank: int, lora_alpha: float, targets, base: str) -> dict:
    lora = {"r": lora_rank, "alpha": lora_alpha, "targets": list(targets)} if lora_rank else None
    return {"format": CHAT_FORMAT, "special_tokens": list(SPECIAL_TOKENS), "lora": lora, "base": base}


def chat_model(base: GPT, fmt: ChatFormat, *, lora_rank: int = 0, lora_alpha: float = 0.0, targets=None, seed=0):
    """The base GPT ready to fine-tune: the reserved tokens' rows added, and LoRA adapters when ``lora_rank``.

    ``lora_alpha`` 0 means alpha = 2r.  A GPT that already has the chat
    vocabulary (a fine-tuned one) is copied as it is.
    """
    if base.cfg.vocab_size not in (fmt.text_vocab_size, fmt.vocab_size):
        raise ValueError(
            f"the base model has {base.cfg.vocab_size} tokens; fine-tuning needs a byte-level GPT "
            f"({fmt.text_vocab_size} tokens) or a chat one ({fmt.vocab_size})"
        )
    model = grow_vocab(base, fmt.vocab_size, seed=seed)  # a copy either way: the base stays as it was
    if lora_rank:
        with torch.random.fork_rng():  # A's random init from the seed alone: the same adapters every run
            torch.manual_seed(seed)
            apply_lora(model, lora_rank, lora_alpha or 2 * lora_rank, targets or DEFAULT_TARGETS)
    return model


def model_from_config(model_config: dict, where: str = "checkpoint") -> GPT:
    """The fine-tuned model a checkpoint's ``model_config`` describes, adapters included (weights untrained)."""
    known = {f.name for f in dataclasses.fields(GPTConfig)}
    try:
        model = GPT(GPTConfig(**{k: v for k, v in model_config.items() if k in known}))
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{where} has an unusable model config ({exc})") from None
    lora = (model_config.get("posttrain") or {}).get("lora")
    if lora:
        apply_lora(model, lora["r"], lora["alpha"], lora["targets"])
    return model


def load_chat_model(checkpoint, flag: str = "--checkpoint") -> tuple[GPT, Optional[ChatFormat]]:
    """A checkpoint's GPT in eval mode with its adapters merged, and its :class:`ChatFormat` (None: not fine-tuned).

    A pretrained checkpoint loads as :func:`gputrain.train.load_model` loads
    it; a fine-tuned one is rebuilt from what its ``model_config`` records.
    ``flag`` names how the caller takes the checkpoint, for the error a corrupt one gets.
    """
    ckpt = read_checkpoint(checkpoint, flag=flag)
    info = (ckpt.model_config or {}).get("posttrain")
    if not info:
        return load_model(ckpt.path)[0], None
    if info.get("format") != CHAT_FORMAT:
        raise CheckpointError(
            f"checkpoint {str(ckpt.path)!r} uses chat format {info.get('format')!r}, this gputrain knows "
            f"{CHAT_FORMAT!r}; load it with the gputrain that wrote it"
        )
    if info.get("stage") == "reward_model":  # a trunk under a score head: not a model that writes replies
        raise CheckpointError(
            f"checkpoint {str(ckpt.path)!r} is a reward model, not a chat model; load it with load_reward_model"
        )
    model = model_from_config(ckpt.model_config, f"checkpoint {str(ckpt.path)!r}")
    if info.get("stage") in ("dpo", "grpo"):  # a policy (beside its frozen reference): keep the policy's weights
        ckpt = dataclasses.replace(ckpt, weights=_under(ckpt.weights, "policy."), aliases=_policy_aliases(ckpt))
    check_compatible(ckpt, model, None)
    load_weights(model, ckpt.weights, ckpt.aliases)
    unload_lora(model)  # merged: the plain GPT, as fast as the base
    return model.eval(), ChatFormat()


def _under(tensors: dict, prefix: str) -> dict:
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


def _policy_aliases(ckpt) -> dict:
    return {k[7:]: v[7:] for k, v in ckpt.aliases.items() if k.startswith("policy.") and v.startswith("policy.")}


def _base(base, lora_rank: int, lora_alpha: float, targets, seed: int, fmt: ChatFormat):
    """The model to fine-tune and its ``model_config``, from a checkpoint path or a GPT."""
    if isinstance(base, GPT):
        base_model, name = base, "a model passed in"
    else:
        base_model, name = load_chat_model(base, flag="--from")[0], str(Path(base))
    model = chat_model(base_model, fmt, lora_rank=lora_rank, lora_alpha=lora_alpha, targets=targets, seed=seed)
    alpha = lora_alpha or 2 * lora_rank
    info = _posttrain_info(lora_rank, alpha, targets or DEFAULT_TARGETS, name)
    return model.train(), {**asdict(model.cfg), "posttrain": info}


def _resumed(resume_from: str, overrides: dict) -> tuple[TrainConfig, GPT, dict]:
    """A resume's config (the checkpoint's, plus ``overrides``) and the model it rebuilds from its own record."""
    cfg, notes, _, _ = resume_config({**overrides, "resume_from": resume_from})
    ckpt = read_checkpoint(resume_from)
    if not (ckpt.model_config or {}).get("posttrain"):
        raise CheckpointError(
            f"checkpoint {str(ckpt.path)!r} is a pretraining run; continue it with gputrain train --resume-from, "
            "or fine-tune it with --from"
        )
    for note in notes:
        print(f"gputrain: {note}")
    return cfg, model_from_config(ckpt.model_config, f"checkpoint {str(ckpt.path)!r}"), ckpt.model_config


def finetune(
    base=None,
    data=None,
    *,
    lora_rank: int = 0,
    lora_alpha: float = 0.0,
    lora_targets=None,
    **overrides,
) -> TrainResult:
    """Supervised fine-tuning of ``base`` (a checkpoint path or a GPT) on chat ``data`` (chapter 12).

    ``data``: a JSONL file of records (``{"messages": [...]}`` or
    ``{"prompt": ..., "response": ...}``) or a list of such records.  The loss
    counts only the assistant's tokens.  ``lora_rank`` > 0 trains LoRA
    adapters of that rank (``lora_alpha`` 0: 2r) on ``lora_targets`` (default:
    every block linear) with the base frozen; 0 trains every weight.
    ``overrides`` are :class:`~gputrain.train.TrainConfig` fields (``max_steps``,
    ``lr``, ``checkpoint_dir``, ``log_dir``, ``val_fraction``, ...) over
    :data:`SFT_DEFAULTS`.  With ``resume_from`` the run continues a fine-tuning
    checkpoint with the settings it holds (``base``, the adapters and the data
    file come from it), exactly as ``train`` resumes.  Every bad input raises
    before anything is written: a bad line names its file and line number.
    """
    fmt = ChatFormat()
    if overrides.get("resume_from"):
        cfg, model, model_config = _resumed(overrides.pop("resume_from"), overrides)
        data = data if data is not None else cfg.data
    else:
        if base is None or data is None:
            raise ValueError("finetune needs a base checkpoint (--from) and chat examples (--data)")
        _check_lora(lora_rank, lora_alpha)
        seed = overrides.get("seed", TrainConfig.seed)
        model, model_config = _base(base, lora_rank, lora_alpha, lora_targets, seed, fmt)
        defaults = {**SFT_DEFAULTS, **({"lr": LORA_LR} if lora_rank else {})}
        shape = {k: v for k, v in asdict(model.cfg).items() if k in _SHAPE}
        source = {"data": str(data)} if isinstance(data, (str, Path)) else {}
        cfg = TrainConfig(**{**shape, **defaults, **source, **overrides})
    train_set, val_set = chat_data(data, fmt, model.cfg.block_size, cfg.val_fraction, cfg.seed)
    if not len(val_set) and cfg.eval_interval:
        cfg = dataclasses.replace(cfg, eval_interval=0)
    return train(cfg, model=model, train_data=train_set, val_data=val_set, model_config=model_config)


_SHAPE = ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "dropout", "bias", "tie_embeddings")


def _check_lora(rank, alpha) -> None:
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ValueError(f"lora_rank must be an integer >= 0 (0: full fine-tuning), got {rank!r}")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or alpha < 0 or alpha != alpha:
        raise ValueError(f"lora_alpha must be a number >= 0 (0: twice the rank), got {alpha!r}")


def chat_data(data, fmt: ChatFormat, block_size: int, val_fraction: float, seed: int):
    """Training and validation :class:`ChatExamples` from a JSONL path or a list of records, padded alike."""
    if isinstance(data, (str, Path)):
        records, where = read_records(data), str(data)
    elif isinstance(data, (list, tuple)):
        records, where = list(data), "record"
        if not records:
            raise ValueError("data is an empty list; give at least one chat record")
    else:
        raise ValueError(f"data must be a JSONL path or a list of records, got {type(data).__name__}")
    examples = encode_records(records, fmt, block_size, where)
    train_part, val_part = split_examples(examples, val_fraction, seed)
    length = max(len(e.ids) - 1 for e in examples)  # one length for both: the same shapes every step
    val_set = ChatExamples(val_part, fmt, length) if val_part else _Empty()
    return ChatExamples(train_part, fmt, length), val_set


class _Empty(list):
    """No validation examples (val_fraction 0): the loop then runs no validation pass."""

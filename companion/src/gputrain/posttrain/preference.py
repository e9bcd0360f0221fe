"""DPO on the book's own training loop: preference pairs, a policy beside its frozen reference (chapter 13).

A preference record is ``{"prompt": ..., "chosen": ..., "rejected": ...}``;
a file holds one per line.  Each pair becomes two chat conversations with the
same user turn, padded to one length and stacked: a batch is ``(x, y)`` of
shape (B, 2, T), row 0 the chosen reply, row 1 the rejected, targets
:data:`~gputrain.posttrain.chat.IGNORE` outside the assistant's tokens.
:class:`PreferenceModel` holds the policy and a frozen copy of where it
started (the reference); its ``forward(x, y)`` returns the sigmoid DPO loss
(:func:`~gputrain.posttrain.dpo.dpo_loss`), so :func:`gputrain.train.train`
runs it as it runs any model: checkpoints, resume, the log, Ctrl-C and SIGTERM
included.  :func:`prefer` is the entry point, ``gputrain dpo`` its command.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import asdict

import torch
import torch.nn as nn
from torch.utils.data import Dataset

from ..train import TrainConfig, TrainResult, train
from .chat import IGNORE, ChatFormat
from .dpo import DPO_BETA, dpo_loss
from .examples import ChatExamples, read_records, split_examples
from .grpo import token_logprobs
from .sft import _SHAPE, SFT_DEFAULTS, _base, _check_lora, _resumed

DPO_DEFAULTS = dict(SFT_DEFAULTS, lr=5e-4, max_steps=200)  # DPO moves a tuned model: a smaller step (TRL: 1e-6 at 7B)


def _pair(record, n: int, where: str, fmt: ChatFormat, block_size: int):
    """One record as its (chosen, rejected) conversations; a bad record is one error naming its line."""
    try:
        if not isinstance(record, dict) or not {"prompt", "chosen", "rejected"} <= set(record):
            have = sorted(record) if isinstance(record, dict) else type(record).__name__
            raise ValueError(f'a preference record needs "prompt", "chosen" and "rejected"; got {have}')
        for key in ("prompt", "chosen", "rejected"):
            if not isinstance(record[key], str) or not record[key]:
                raise ValueError(f'"{key}" must be non-empty text')
        user = {"role": "user", "content": record["prompt"]}
        return tuple(
            fmt.encode([user, {"role": "assistant", "content": record[k]}], block_size) for k in ("chosen", "rejected")
        )
    except ValueError as exc:
        raise ValueError(f"{where}:{n}: {exc}") from None


class PreferencePairs(Dataset):
    """Pairs as (2, T) inputs and targets: row 0 chosen, row 1 rejected, padded as :class:`ChatExamples` pads."""

    def __init__(self, pairs: list, fmt: ChatFormat, length: int):
        flat = ChatExamples([e for pair in pairs for e in pair], fmt, length)  # chosen, rejected, chosen, ...
        self.x, self.y = flat.x.view(len(pairs), 2, -1), flat.y.view(len(pairs), 2, -1)  # (N, 2, T)
        self.corpus_sha256 = flat.corpus_sha256

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


def preference_data(data, fmt: ChatFormat, block_size: int, val_fraction: float, seed: int):
    """Training and validation :class:`PreferencePairs` from a JSONL path or a list of records."""
    if isinstance(data, (list, tuple)):
        records, where = list(enumerate(data, 1)), "record"
    else:
        records, where = read_records(data), str(data)
    pairs = [_pair(r, n, where, fmt, block_size) for n, r in records]
    train_part, val_part = split_examples(pairs, val_fraction, seed)
    length = max(len(e.ids) - 1 for pair in pairs for e in pair)
    return PreferencePairs(train_part, fmt, length), (PreferencePairs(val_part, fmt, length) if val_part else [])


class PreferenceModel(nn.Module):
    """A policy and its frozen reference; ``forward(x, y)`` gives ``(None, the DPO loss)`` on (B, 2, T) pairs."""

    def __init__(self, policy: nn.Module, reference: nn.Module, beta: float = DPO_BETA):
        super().__init__()
        if not beta > 0:
            raise ValueError(f"DPO's beta must be > 0 (the pull towards the reference), got {beta}")
        self.policy, self.reference, self.beta = policy, reference.eval(), beta
        for p in self.reference.parameters():
            p.requires_grad_(False)

    def sequence_logprobs(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Each reply's summed log-prob (B, 2) over its counted tokens."""
        flat_x, flat_y = x.flatten(0, 1), y.flatten(0, 1)  # (2B, T)
        counted = flat_y != IGNORE
        logps = token_logprobs(model(flat_x)[0].float(), flat_y.clamp(min=0))  # (2B, T)
        return (logps * counted).sum(-1).view(x.shape[:2])

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None):
        policy = self.sequence_logprobs(self.policy, x, y)  # (B, 2)
        with torch.no_grad():
            reference = self.sequence_logprobs(self.reference, x, y)
        loss = dpo_loss(policy[:, 0], policy[:, 1], reference[:, 0], reference[:, 1], self.beta)
        return None, loss


def prefer(base=None, data=None, *, beta: float = DPO_BETA, lora_rank: int = 0, lora_alpha: float = 0.0,
           lora_targets=None, **overrides) -> TrainResult:  # fmt: skip
    """DPO of ``base`` (a checkpoint, usually fine-tuned by :func:`finetune`, or a GPT) on preference ``data``.

    ``data``: a JSONL file of ``{"prompt", "chosen", "rejected"}`` records, or
    a list of them.  The reference is the base as it was given.  ``lora_rank``
    > 0 trains adapters only.  ``overrides`` are TrainConfig fields; with
    ``resume_from`` the run continues a DPO checkpoint with its own settings.
    Returns the run's TrainResult; ``result.model.policy`` is the tuned policy.
    """
    fmt = ChatFormat()
    if overrides.get("resume_from"):
        cfg, policy, model_config = _resumed(overrides.pop("resume_from"), overrides)
        info = model_config["posttrain"]
        reference, beta = _reference_of(policy), info["beta"]
        data = data if data is not None else cfg.data
    else:
        if base is None or data is None:
            raise ValueError("prefer needs a base checkpoint (--from) and preference pairs (--data)")
        _check_lora(lora_rank, lora_alpha)
        seed = overrides.get("seed", TrainConfig.seed)
        reference = _base(base, 0, 0.0, None, seed, fmt)[0]  # the model as given, grown to the chat vocabulary
        policy, model_config = _base(base, lora_rank, lora_alpha, lora_targets, seed, fmt)
        model_config["posttrain"].update(stage="dpo", beta=beta)
        shape = {k: v for k, v in asdict(policy.cfg).items() if k in _SHAPE}
        source = {"data": str(data)} if not isinstance(data, (list, tuple)) else {}
        cfg = TrainConfig(**{**shape, **DPO_DEFAULTS, **source, **overrides})
    model = PreferenceModel(policy, reference, beta)
    train_set, val_set = preference_data(data, fmt, policy.cfg.block_size, cfg.val_fraction, cfg.seed)
    if not len(val_set) and cfg.eval_interval:
        cfg = dataclasses.replace(cfg, eval_interval=0)
    return train(cfg, model=model, train_data=train_set, val_data=val_set, model_config=model_config)


def _reference_of(policy: nn.Module) -> nn.Module:
    """A reference of the policy's shape without adapters; the checkpoint's weights overwrite it on resume."""
    from .lora import unload_lora

    reference = copy.deepcopy(policy)
    unload_lora(reference)
    return reference

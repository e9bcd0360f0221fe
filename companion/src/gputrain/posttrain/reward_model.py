"""A Bradley-Terry reward model on the book's own training loop: InstructGPT's RM in miniature (chapter 13).

A reward model reads a whole conversation and returns one number.  It is the
chat GPT's trunk (initialised from the fine-tuned model, as InstructGPT
initialises its RM from the SFT model) with a scalar head ``Linear(n_embd, 1)``
read at the conversation's last real token: the ``<|end|>`` that closes the
assistant's reply, the first position that has seen all of it.  Trained on
preference pairs, it learns scores whose difference gives the odds that one
reply is preferred (Bradley and Terry, 1952)::

    P(chosen > rejected) = sigmoid(r(chosen) - r(rejected))
    loss = -log sigmoid(r(chosen) - r(rejected))      (the mean over pairs)

The head starts at zero, so every score is 0 at step 0, the loss is ln 2
exactly and every pair is a tie.  It has no bias: adding a constant to every
score leaves each difference, and so the loss, unchanged, and a bias would
never get a gradient.  :class:`RewardModel`'s ``forward(x, y)`` takes the
(B, 2, T) batches of :class:`~gputrain.posttrain.preference.PreferencePairs`
and returns ``(None, loss)``, so :func:`gputrain.train.train` runs it with its
checkpoints, resume and log.  :func:`pairwise_accuracy` scores held-out pairs;
:func:`as_reward` turns the model into a reward function with TRL's
convention, the number PPO maximises.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..train import TrainConfig, TrainResult, read_checkpoint, train
from ..train.checkpoint import CheckpointError, check_compatible, load_weights
from .chat import IGNORE, ChatFormat
from .evaluate import Estimate, wilson_interval
from .preference import PreferencePairs, preference_data
from .sft import _SHAPE, CHAT_FORMAT, SFT_DEFAULTS, _base, _resumed, model_from_config

# From scratch on a tiny model: fine-tuning's settings (no weight decay, a short warmup), fewer steps
RM_DEFAULTS = dict(SFT_DEFAULTS, lr=1e-3, max_steps=200)
STAGE = "reward_model"  # what a reward model's checkpoint records under model_config["posttrain"]["stage"]
SCORE_BATCH = 64  # conversations per forward pass when scoring many


def bradley_terry_loss(chosen_scores: torch.Tensor, rejected_scores: torch.Tensor) -> torch.Tensor:
    """-log sigmoid(r(chosen) - r(rejected)), the mean over pairs: the negative log-likelihood of the preferences."""
    if chosen_scores.shape != rejected_scores.shape or chosen_scores.dim() != 1 or not len(chosen_scores):
        raise ValueError(
            f"the scores must be two (B,) tensors of one shape, B >= 1; got {tuple(chosen_scores.shape)} "
            f"and {tuple(rejected_scores.shape)}"
        )
    return -F.logsigmoid(chosen_scores - rejected_scores).mean()


class RewardModel(nn.Module):
    """A chat GPT's trunk with a zero-initialised scalar head read at each conversation's last real token."""

    def __init__(self, trunk: nn.Module):
        super().__init__()
        self.trunk = trunk
        self.score = nn.Linear(trunk.cfg.n_embd, 1, bias=False)  # no bias: a shift of every score changes no loss
        nn.init.zeros_(self.score.weight)  # every score 0 at the start: the loss is ln 2, every pair a tie

    @property
    def block_size(self) -> int:
        return self.trunk.cfg.block_size

    def read(self, ids: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        """The score (N,) (float32 or wider) of each row of ``ids`` (N, L), read at position ``last`` (N,)."""
        hidden = self.trunk.hidden(ids)  # (N, L, C)
        at = hidden[torch.arange(len(ids), device=ids.device), last]  # (N, C)
        scores = self.score(at).squeeze(-1)
        return scores.to(torch.promote_types(scores.dtype, torch.float32))  # float32 under bf16 autocast

    def pair_scores(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """(B, 2) scores of the chosen and rejected conversations of a (B, 2, T) preference batch.

        ``x`` holds each conversation without its last id (the ``<|end|>``),
        which is the last counted target in ``y``: it is put back after the
        reply and the score read there.
        """
        flat_x, flat_y = x.flatten(0, 1), y.flatten(0, 1)  # (2B, T)
        counted = flat_y != IGNORE
        T = flat_y.shape[1]
        last_target = T - 1 - counted.flip(-1).int().argmax(-1)  # (2B,) where the reply's <|end|> is the target
        full = torch.cat([flat_x, torch.zeros_like(flat_x[:, :1])], 1)  # (2B, T + 1)
        full[torch.arange(len(full), device=x.device), last_target + 1] = flat_y.gather(1, last_target[:, None])[:, 0]
        full = full[:, : int(last_target.max()) + 2]  # nothing after the longest conversation
        return self.read(full, last_target + 1).view(x.shape[:2])

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None):
        if y is None:
            raise ValueError("RewardModel.forward needs the (B, 2, T) targets that mark each reply's end")
        scores = self.pair_scores(x, y)  # (B, 2)
        return None, bradley_terry_loss(scores[:, 0], scores[:, 1])

    def scores(self, conversations) -> torch.Tensor:
        """(N,) float32 scores of whole conversations given as token-id lists (each ending in ``<|end|>``)."""
        conversations = [list(map(int, c)) for c in conversations]
        for i, c in enumerate(conversations):
            if not 1 <= len(c) <= self.block_size:
                raise ValueError(
                    f"conversation {i} is {len(c)} tokens; the reward model reads 1 to {self.block_size} "
                    "(its context): shorten it"
                )
        device = next(self.parameters()).device
        out = []
        for start in range(0, len(conversations), SCORE_BATCH):
            batch = conversations[start : start + SCORE_BATCH]
            ids = torch.zeros(len(batch), max(map(len, batch)), dtype=torch.long)  # pads follow: causal, never read
            for i, c in enumerate(batch):
                ids[i, : len(c)] = torch.tensor(c)
            last = torch.tensor([len(c) - 1 for c in batch], device=device)
            out.append(self.read(ids.to(device), last))
        return torch.cat(out) if out else torch.zeros(0)


def reward_pairs(data, fmt: ChatFormat, block_size: int, val_fraction: float = 0.0, seed: int = 0):
    """Training and held-out :class:`PreferencePairs` as the reward model reads them, from records or a JSONL path.

    A whole conversation, its closing ``<|end|>`` included, must fit the
    model's context: each may be at most ``block_size`` tokens.
    """
    if isinstance(data, (list, tuple)):
        if not data:
            raise ValueError('data is an empty list; give at least one {"prompt", "chosen", "rejected"} record')
    elif not isinstance(data, (str, Path)):
        raise ValueError(f"data must be a JSONL path or a list of preference records, got {type(data).__name__}")
    return preference_data(data, fmt, block_size - 1, val_fraction, seed)


def train_reward_model(base=None, data=None, *, val_fraction: float = 0.1, **overrides) -> TrainResult:
    """Train a Bradley-Terry reward model from ``base`` (a chat checkpoint or a GPT) on preference ``data``.

    ``data``: a JSONL file of ``{"prompt", "chosen", "rejected"}`` records, or
    a list of them; the last ``val_fraction`` (seeded shuffle) is held out as
    the validation pairs, ``reward_pairs(data, ChatFormat(), block_size,
    val_fraction, seed)[1]`` for :func:`pairwise_accuracy`.  ``overrides`` are TrainConfig fields over
    :data:`RM_DEFAULTS`; with ``resume_from`` the run continues a reward-model
    checkpoint with its own settings.  ``result.model`` is the
    :class:`RewardModel`; :func:`load_reward_model` loads its checkpoint.
    """
    fmt = ChatFormat()
    if overrides.get("resume_from"):
        cfg, trunk, model_config = _resumed(overrides.pop("resume_from"), overrides)
        if model_config["posttrain"].get("stage") != STAGE:
            raise CheckpointError("resume_from is not a reward model's checkpoint; resume it as the run that made it")
        data = data if data is not None else cfg.data
        if not data:
            raise ValueError("give the preference pairs (data) again: the checkpoint's run read them from a list")
    else:
        if base is None or data is None:
            raise ValueError("train_reward_model needs a base (a chat checkpoint or a GPT) and preference pairs (data)")
        seed = overrides.get("seed", TrainConfig.seed)
        trunk, model_config = _base(base, 0, 0.0, None, seed, fmt)
        model_config["posttrain"].update(stage=STAGE)
        shape = {k: v for k, v in asdict(trunk.cfg).items() if k in _SHAPE}
        source = {"data": str(data)} if isinstance(data, (str, Path)) else {}
        cfg = TrainConfig(**{**shape, **RM_DEFAULTS, **source, "val_fraction": val_fraction, **overrides})
    train_set, val_set = reward_pairs(data, fmt, trunk.cfg.block_size, cfg.val_fraction, cfg.seed)
    if not len(val_set) and cfg.eval_interval:
        cfg = dataclasses.replace(cfg, eval_interval=0)
    return train(cfg, model=RewardModel(trunk), train_data=train_set, val_data=val_set, model_config=model_config)


def load_reward_model(checkpoint, flag: str = "--reward-model") -> tuple[RewardModel, ChatFormat]:
    """A reward model's checkpoint as a :class:`RewardModel` in eval mode, with its :class:`ChatFormat`."""
    ckpt = read_checkpoint(checkpoint, flag=flag)
    info = (ckpt.model_config or {}).get("posttrain") or {}
    where = f"checkpoint {str(ckpt.path)!r}"
    if info.get("stage") != STAGE:
        raise CheckpointError(f"{where} is not a reward model; train one with train_reward_model")
    if info.get("format") != CHAT_FORMAT:
        raise CheckpointError(f"{where} uses chat format {info.get('format')!r}, this gputrain knows {CHAT_FORMAT!r}")
    model = RewardModel(model_from_config(ckpt.model_config, where))
    check_compatible(ckpt, model, None)
    load_weights(model, ckpt.weights, ckpt.aliases)
    return model.eval(), ChatFormat()


@torch.no_grad()
def pairwise_accuracy(rm: RewardModel, pairs, fmt: ChatFormat) -> Estimate:
    """The share of pairs whose chosen reply scores above the rejected (a tie counts half), with Wilson's interval.

    ``pairs``: :class:`PreferencePairs` (e.g. :func:`reward_pairs`' held-out
    part), a list of preference records, or a JSONL path of them.
    """
    if not isinstance(pairs, PreferencePairs):
        pairs = reward_pairs(pairs, fmt, rm.block_size)[0]
    device, was_training = next(rm.parameters()).device, rm.training
    rm.eval()
    try:
        scores = torch.cat(
            [
                rm.pair_scores(pairs.x[i : i + SCORE_BATCH].to(device), pairs.y[i : i + SCORE_BATCH].to(device))
                for i in range(0, len(pairs), SCORE_BATCH)
            ]
        )  # (N, 2)
    finally:
        rm.train(was_training)
    wins = (scores[:, 0] > scores[:, 1]).sum().item() + 0.5 * (scores[:, 0] == scores[:, 1]).sum().item()
    return wilson_interval(wins, len(scores))


def _conversation(prompt, completion, fmt: ChatFormat) -> list[int]:
    """A prompt (text or messages) and its reply (text, possibly empty) as one conversation's ids."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    if not isinstance(completion, str):  # TRL's conversational form: [{"role": "assistant", "content": ...}]
        completion = "".join(m["content"] for m in completion)
    return fmt.encode_prompt(messages) + fmt.tokenizer.encode(completion) + [fmt.end_id]


def as_reward(rm: RewardModel, fmt: ChatFormat):
    """``fn(prompts=, completions=, **columns) -> list[float]``: the reward model's score of each reply (TRL's call).

    A prompt is the user's text or a list of messages; a completion is the
    reply's text (empty allowed).  Scored in batches, without gradients, in
    eval mode; the model's own mode is restored after.
    """

    def reward_model(prompts, completions, **columns) -> list[float]:
        if len(prompts) != len(completions):
            raise ValueError(f"{len(completions)} completions for {len(prompts)} prompts; give one prompt each")
        ids = [_conversation(p, c, fmt) for p, c in zip(prompts, completions)]
        was_training = rm.training
        rm.eval()
        try:
            with torch.no_grad():
                return rm.scores(ids).tolist()
        finally:
            rm.train(was_training)

    return reward_model

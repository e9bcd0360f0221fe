"""GRPO on the book's own training loop: each step samples, grades and learns (chapter 13).

A step's batch is a handful of training problems (their indices).
:class:`GRPOModel`'s ``forward`` does what an RL step does: it samples G
replies to each with the KV cache (:func:`~gputrain.posttrain.rollout.rollout`),
grades them exactly (:func:`~gputrain.posttrain.rewards.task_rewards`),
turns the rewards into group advantages, scores the replies again with
gradient (:func:`~gputrain.posttrain.rollout.policy_logprobs`) and returns the
GRPO-family loss (:func:`~gputrain.posttrain.grpo.grpo_loss`, equal to TRL's).
So :func:`gputrain.train.train` runs RL with everything it gives pretraining:
checkpoints, a resume that redraws the same samples (the sampling seed of
each step comes from the RNG the checkpoint restores), the log, Ctrl-C and
SIGTERM.  The loss is not the progress signal (a group whose replies all
score alike has zero advantage and adds nothing): :attr:`GRPOModel.history`
keeps each step's mean reward, and held-out accuracy is
:func:`~gputrain.posttrain.evaluate.evaluate_task`'s.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
from dataclasses import asdict

import torch
import torch.nn as nn
from torch.utils.data import Dataset

from ..train import TrainConfig, TrainResult, train
from .chat import ChatFormat
from .grpo import LOSS_TYPES, SCALE_REWARDS, group_advantages, grpo_loss
from .lora import unload_lora
from .rewards import task_rewards
from .rollout import policy_logprobs, rollout
from .sft import _SHAPE, SFT_DEFAULTS, _base, _check_lora, _resumed
from .tasks import problems as draw_problems

RL_DEFAULTS = dict(SFT_DEFAULTS, lr=3e-4, max_steps=100, batch_size=8, warmup_steps=5, eval_interval=0)


@dataclasses.dataclass(frozen=True)
class GRPOSettings:
    """What one GRPO step does, stored in the checkpoint so that a resume does the same."""

    task: str = "arithmetic"  # the task whose train problems are asked
    n_problems: int = 512  # distinct train problems drawn
    digits: int = 2  # the task's difficulty: digits per operand
    ops: str = "+"  # arithmetic's operations, e.g. "+" or "+-*"
    group_size: int = 8  # replies sampled per problem (G)
    loss_type: str = "dapo"  # TRL's loss_type: grpo, dr_grpo, dapo or bnpo
    scale_rewards: str = "group"  # TRL's scale_rewards: group, batch or none
    beta: float = 0.0  # the k3 KL penalty's weight towards the reference (0: no reference kept)
    temperature: float = 1.0  # sampling temperature
    max_new_tokens: int = 16  # longest reply

    def check(self) -> None:
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 (advantages compare replies in a group), got {self.group_size}")
        if not self.beta >= 0:
            raise ValueError(f"beta must be >= 0, got {self.beta}")
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"unknown loss_type {self.loss_type!r}; use one of: {', '.join(LOSS_TYPES)}")
        if self.scale_rewards not in SCALE_REWARDS:
            raise ValueError(f"unknown scale_rewards {self.scale_rewards!r}; use one of: {', '.join(SCALE_REWARDS)}")
        if not self.ops or set(self.ops) - set("+-*"):
            raise ValueError(f"ops must be made of + - *, got {self.ops!r}")
        if not self.temperature > 0 or self.max_new_tokens < 1 or self.n_problems < 1:
            raise ValueError("temperature must be > 0, max_new_tokens and n_problems >= 1")


class ProblemIndices(Dataset):
    """Problem ``i`` as the pair ``(i, i)``: the loop batches indices, the model looks the problems up."""

    def __init__(self, problems: list):
        self.problems = problems
        text = "\n".join(p.canonical for p in problems).encode()
        self.corpus_sha256 = hashlib.sha256(text).hexdigest()

    def __len__(self) -> int:
        return len(self.problems)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.tensor(i), torch.tensor(i)


class GRPOModel(nn.Module):
    """A policy (and, with beta > 0, its frozen reference) whose forward is one GRPO step's loss."""

    def __init__(self, policy: nn.Module, reference, problems: list, settings: GRPOSettings):
        super().__init__()
        settings.check()
        self.policy, self.problems, self.settings, self.fmt = policy, problems, settings, ChatFormat()
        self.reference = reference.eval() if settings.beta else None
        for p in self.reference.parameters() if self.reference is not None else ():
            p.requires_grad_(False)
        self.history: list[dict] = []  # per step: mean reward, share of groups with zero advantage, tokens

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None):
        s, G = self.settings, self.settings.group_size
        asked = [self.problems[i] for i in x.flatten().tolist()]
        prompts = [self.fmt.encode_prompt(p.prompt()) for p in asked]
        seed = int(torch.randint(0, 2**31 - 1, ()))  # from the global RNG: a resume restores it
        ro = rollout(self.policy, prompts, group_size=G, stop=self.fmt.end_id, temperature=s.temperature,
                     seed=seed, max_new_tokens=s.max_new_tokens)  # fmt: skip
        replies = [self.fmt.reply(ids) for ids in ro.replies()]
        rewards = task_rewards([p for p in asked for _ in range(G)], replies)  # (B * G,)
        advantages = group_advantages(rewards, G, s.scale_rewards)
        logps = policy_logprobs(self.policy, ro)  # (B * G, T), with gradient
        ref = None
        if self.reference is not None:
            with torch.no_grad():
                ref = policy_logprobs(self.reference, ro)
        loss = grpo_loss(logps, ro.mask.to(logps.dtype), advantages.to(logps.dtype), ref_logps=ref,
                         loss_type=s.loss_type, beta=s.beta, max_length=s.max_new_tokens)  # fmt: skip
        flat = rewards.view(-1, G)
        self.history.append(
            dict(
                reward=float(rewards.mean()),
                zero_groups=float((flat.std(1) == 0).float().mean()),
                tokens=ro.tokens,
                rollout_seconds=ro.seconds,
            )  # fmt: skip
        )
        return None, loss


def reinforce(base=None, *, settings: GRPOSettings | None = None, lora_rank: int = 0, lora_alpha: float = 0.0,
              lora_targets=None, **overrides) -> TrainResult:  # fmt: skip
    """GRPO of ``base`` (a checkpoint, usually fine-tuned by :func:`finetune`, or a GPT) on a task's train problems.

    ``settings``: the :class:`GRPOSettings` (task, group size, loss type,
    beta, ...).  ``overrides`` are TrainConfig fields (``max_steps``, ``lr``,
    ``batch_size`` = problems per step, ``checkpoint_dir``, ...); with
    ``resume_from`` the run continues a GRPO checkpoint with its own settings.
    ``result.model.history`` holds each step's mean reward.
    """
    if overrides.get("resume_from"):
        cfg, policy, model_config = _resumed(overrides.pop("resume_from"), overrides)
        settings = GRPOSettings(**model_config["posttrain"]["grpo"])
        reference = _plain_copy(policy) if settings.beta else None
    else:
        settings = settings or GRPOSettings()
        settings.check()
        if base is None:
            raise ValueError("reinforce needs a checkpoint to start from (--from), usually a fine-tuned one")
        _check_lora(lora_rank, lora_alpha)
        seed = overrides.get("seed", TrainConfig.seed)
        policy, model_config = _base(base, lora_rank, lora_alpha, lora_targets, seed, ChatFormat())
        reference = _base(base, 0, 0.0, None, seed, ChatFormat())[0] if settings.beta else None
        model_config["posttrain"].update(stage="grpo", grpo=asdict(settings))
        shape = {k: v for k, v in asdict(policy.cfg).items() if k in _SHAPE}
        cfg = TrainConfig(**{**shape, **RL_DEFAULTS, **overrides})
    asked = draw_problems(
        settings.task,
        settings.n_problems,
        split="train",
        digits=settings.digits,
        ops=tuple(settings.ops),
        seed=cfg.seed,
    )
    data, cfg = ProblemIndices(asked), dataclasses.replace(cfg, eval_interval=0)  # held-out accuracy is evaluate_task's
    return train(cfg, model=GRPOModel(policy, reference, asked, settings), train_data=data, val_data=[],
                 model_config=model_config)  # fmt: skip


def _plain_copy(policy: nn.Module) -> nn.Module:
    reference = copy.deepcopy(policy)
    unload_lora(reference)
    return reference

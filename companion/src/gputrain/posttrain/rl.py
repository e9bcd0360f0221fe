"""GRPO, RLOO and PPO on the book's own training loop: each step samples, grades and learns (chapter 13).

A step's batch is a handful of training problems (their indices).
:class:`GRPOModel`'s ``forward`` does what an RL step does: it samples G
replies to each with the KV cache (:func:`~gputrain.posttrain.rollout.rollout`),
grades them exactly (:func:`~gputrain.posttrain.rewards.task_rewards`) or with
a user's reward (``module:function`` or a Python callable, checked by
:func:`~gputrain.posttrain.rewards.score_replies` before any gradient), turns
the rewards into advantages by the chosen algorithm (:data:`ALGOS`: GRPO's
group advantages, RLOO's leave-one-out baseline, PPO's value model and GAE,
:mod:`~gputrain.posttrain.rlalgos`), scores the replies again with gradient
(:func:`~gputrain.posttrain.rollout.policy_logprobs`) and returns the loss.
With ``num_iterations`` > 1 one rollout serves that many optimizer steps,
its sampled log-probs as pi_old, kept in the model's buffers
(:class:`~gputrain.posttrain.rlcycle.RolloutStore`) so that a checkpoint
taken mid-cycle resumes exactly.

So :func:`gputrain.train.train` runs RL with everything it gives pretraining:
checkpoints, a resume that redraws the same samples (the sampling seed of
each step comes from the RNG the checkpoint restores), the log, Ctrl-C and
SIGTERM.  The loss is not the progress signal (a group whose replies all
score alike has zero advantage and adds nothing): :attr:`GRPOModel.history`
keeps each step's record (:data:`~gputrain.posttrain.rlstats.HISTORY_KEYS`:
reward, zero-advantage groups, lengths, entropy, clip fraction, KL, times),
and held-out accuracy is :func:`~gputrain.posttrain.evaluate.evaluate_task`'s.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import time
from dataclasses import asdict
from typing import Callable, Optional

import torch
import torch.nn as nn
from torch.utils.data import Dataset

from ..train import TrainConfig, TrainResult, train
from .chat import ChatFormat
from .lora import unload_lora
from .rewards import load_reward, score_replies, task_rewards
from .rlalgos import algo_advantages, algo_loss, mean_kl
from .rlcycle import RolloutStore, Scored
from .rlsettings import GRPOSettings
from .rlstats import step_record
from .rollout import policy_logprobs, rollout
from .sft import _SHAPE, SFT_DEFAULTS, _base, _check_lora, _resumed
from .tasks import ANSWER_PREFIX
from .tasks import problems as draw_problems
from .value import ValueModel

# lr: on chapter 12's SFT model GRPO at 5e-4 and 1e-3 collapsed the reward (0.10 -> 0.01), 3e-4 dropped greedy
# accuracy in six steps, 1e-4 gained (book/results/rewards_cpu.json, bench/record_rewards.py)
RL_DEFAULTS = dict(SFT_DEFAULTS, lr=1e-4, max_steps=100, batch_size=8, warmup_steps=5, eval_interval=0)


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
    """A policy (with its frozen reference, and PPO's value model, when kept) whose forward is one RL step's loss.

    ``reward_fn``: a Python reward, ``fn(prompts=, completions=, answers=)``
    (None: ``settings.reward``, else the task's grader).  ``batch_size``:
    problems per step, needed to size the rollout store when
    ``settings.num_iterations`` > 1.
    """

    def __init__(self, policy: nn.Module, reference, problems: list, settings: GRPOSettings, *,
                 reward_fn: Optional[Callable] = None, batch_size: Optional[int] = None):  # fmt: skip
        super().__init__()
        settings.check()
        self.policy, self.problems, self.settings, self.fmt = policy, problems, settings, ChatFormat()
        self.reference = reference.eval() if settings.keeps_reference else None
        for p in self.reference.parameters() if self.reference is not None else ():
            p.requires_grad_(False)
        self.value = ValueModel(policy) if settings.algo == "ppo" else None
        # kept outside the module tree: a reward model passed as an nn.Module must not train or be saved with the policy
        self.__dict__["reward_fn"] = reward_fn or (load_reward(settings.reward) if settings.reward else None)
        self.reward_name = settings.reward or getattr(reward_fn, "__name__", None)
        self.store = None
        if settings.num_iterations > 1:
            if not batch_size:
                raise ValueError("num_iterations > 1 keeps a rollout: give GRPOModel its batch_size")
            self.store = RolloutStore(batch_size, settings.group_size, settings.max_new_tokens,
                                      per_token_advantages=settings.algo == "ppo",
                                      optional=self._kept())  # fmt: skip
        self.history: list[dict] = []  # per step: rlstats.HISTORY_KEYS
        self._learn_start = 0.0
        for p in self.parameters():
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(self._backward_done)

    def _kept(self) -> tuple[str, ...]:
        return (("ref_logps",) if self.settings.keeps_reference else ()) + (
            ("values", "returns") if self.settings.algo == "ppo" else ()
        )

    def _backward_done(self, _param) -> None:
        """Runs as each parameter's gradient lands: the last one marks the end of the learner's backward."""
        if self.history:
            self.history[-1]["learn_seconds"] = time.perf_counter() - self._learn_start

    def _prompt(self, index: int) -> list[int]:
        return self.fmt.encode_prompt(self.problems[index].prompt())

    def rewards(self, asked: list, replies: list[str]) -> torch.Tensor:
        """(N,) float64 rewards of ``replies`` to ``asked`` (one problem per reply): the task's, or the user's."""
        if self.reward_fn is None:
            return task_rewards(asked, replies)
        return score_replies(self.reward_fn, prompts=[p.question for p in asked], completions=replies,
                             answers=[p.answer for p in asked], name=self.reward_name)  # fmt: skip

    def score(self, indices: torch.Tensor) -> Scored:
        """A fresh rollout of the problems ``indices`` (B,), graded, with its advantages: no gradient yet."""
        s, G = self.settings, self.settings.group_size
        asked = [self.problems[i] for i in indices.tolist()]
        seed = int(torch.randint(0, 2**31 - 1, ()))  # from the global RNG: a resume restores it
        ro = rollout(self.policy, [self._prompt(i) for i in indices.tolist()], group_size=G, stop=self.fmt.end_id,
                     temperature=s.temperature, seed=seed, max_new_tokens=s.max_new_tokens)  # fmt: skip
        replies = [self.fmt.reply(ids) for ids in ro.replies()]
        rewards = self.rewards([p for p in asked for _ in range(G)], replies).to(ro.mask.device)
        with torch.no_grad():
            ref = policy_logprobs(self.reference, ro) if self.reference is not None else None
            values = self.value(ro) if self.value is not None else None
        advantages, returns = algo_advantages(s, rewards, ro.mask, ro.logps, ref, values)
        return Scored(indices.cpu(), ro, rewards, advantages, ref, values, returns)

    def batch(self, x: torch.Tensor) -> tuple[Scored, bool]:
        """This step's scored rollout and whether it was sampled now (else the cycle's, read back)."""
        if self.store is None:
            return self.score(x.flatten()), True
        fresh = self.store.fresh(self.settings.num_iterations)
        seconds = 0.0
        if fresh:
            scored = self.score(x.flatten())
            self.store.keep(scored)
            seconds = scored.rollout.seconds
        dtype = next(self.policy.parameters()).dtype
        scored = self.store.read(self._prompt, self.fmt.end_id, self.settings.temperature, seconds, dtype)
        self.store.steps += 1
        return scored, fresh

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None):
        s, start = self.settings, time.perf_counter()
        scored, fresh = self.batch(x)
        ro, self._learn_start = scored.rollout, time.perf_counter()
        logps, entropy = policy_logprobs(self.policy, ro, entropy=True)  # (N, T) with gradient, and detached
        old = ro.logps.to(logps.dtype) if s.num_iterations > 1 else logps.detach()  # pi_old: the sampler's
        values = self.value(ro) if self.value is not None else None
        out = algo_loss(s, logps, old, ro.mask, scored.advantages, scored.ref_logps, values, scored.values,
                        scored.returns)  # fmt: skip
        kl = mean_kl(logps, scored.ref_logps, ro.mask) if scored.ref_logps is not None else None
        self.history.append(
            step_record(
                scored.rewards,
                ro.lengths,
                s.group_size,
                entropy,
                ro.mask,
                loss=float(out.loss.detach()),
                clip_fraction=out.clip_fraction,
                kl=kl,
                value_loss=out.value_loss,
                rollout_seconds=ro.seconds if fresh else 0.0,
                score_seconds=self._learn_start - start - (ro.seconds if fresh else 0.0),
                learn_seconds=time.perf_counter() - self._learn_start,
                fresh=fresh,
            )  # fmt: skip
        )
        return None, out.loss


def reinforce(base=None, *, settings: GRPOSettings | None = None, reward_fn: Optional[Callable] = None,
              lora_rank: int = 0, lora_alpha: float = 0.0, lora_targets=None, **overrides) -> TrainResult:  # fmt: skip
    """RL (``settings.algo``: GRPO, RLOO or PPO) of ``base`` (a checkpoint, usually fine-tuned, or a GPT) on a task.

    ``settings``: the :class:`GRPOSettings` (algorithm, task, group size,
    loss type, beta, reward, ...).  ``reward_fn``: a Python reward
    ``fn(prompts=, completions=, **columns)`` (e.g. a reward model), used in
    place of the task's grader; a checkpoint cannot hold it, so a resume of
    such a run must be given it again.  ``overrides`` are TrainConfig fields
    (``max_steps``, ``lr``, ``batch_size`` = problems per step,
    ``checkpoint_dir``, ...); with ``resume_from`` the run continues an RL
    checkpoint with its own settings.  ``result.model.history`` holds each
    step's record (:data:`~gputrain.posttrain.rlstats.HISTORY_KEYS`).
    """
    if overrides.get("resume_from"):
        cfg, policy, model_config = _resumed(overrides.pop("resume_from"), overrides)
        settings = GRPOSettings(**model_config["posttrain"]["grpo"])
        _check_resumed_reward(model_config, reward_fn)
        reference = _plain_copy(policy) if settings.keeps_reference else None
    else:
        settings = settings or GRPOSettings()
        settings.check()
        if base is None:
            raise ValueError("reinforce needs a checkpoint to start from (--from), usually a fine-tuned one")
        if reward_fn is not None and settings.reward:
            raise ValueError(f"give one reward: reward_fn or settings.reward ({settings.reward!r}), not both")
        _check_lora(lora_rank, lora_alpha)
        seed = overrides.get("seed", TrainConfig.seed)
        policy, model_config = _base(base, lora_rank, lora_alpha, lora_targets, seed, ChatFormat())
        reference = _base(base, 0, 0.0, None, seed, ChatFormat())[0] if settings.keeps_reference else None
        model_config["posttrain"].update(stage="grpo", grpo=asdict(settings))
        if reward_fn is not None:
            model_config["posttrain"]["reward_fn"] = getattr(reward_fn, "__qualname__", repr(reward_fn))
        shape = {k: v for k, v in asdict(policy.cfg).items() if k in _SHAPE}
        cfg = TrainConfig(**{**shape, **RL_DEFAULTS, **overrides})
    if settings.num_iterations > 1 and cfg.grad_accum_steps > 1:
        raise ValueError("num_iterations > 1 reuses a step's rollout: use grad_accum_steps 1 (raise batch_size)")
    asked = draw_problems(settings.task, settings.n_problems, split="train", digits=settings.digits,
                          ops=tuple(settings.ops), seed=cfg.seed)  # fmt: skip
    data, cfg = ProblemIndices(asked), dataclasses.replace(cfg, eval_interval=0)  # held-out accuracy is evaluate_task's
    model = GRPOModel(policy, reference, asked, settings, reward_fn=reward_fn, batch_size=cfg.batch_size)
    if model.reward_fn is not None:
        _probe_reward(model, asked[0])
    return train(cfg, model=model, train_data=data, val_data=[], model_config=model_config)


def _check_resumed_reward(model_config: dict, reward_fn) -> None:
    recorded = model_config["posttrain"].get("reward_fn")
    if recorded and reward_fn is None:
        raise ValueError(
            f"this run was rewarded by the Python function {recorded}, which a checkpoint cannot hold; "
            "resume it with reinforce(resume_from=..., reward_fn=...)"
        )
    if reward_fn is not None and not recorded:
        raise ValueError("this run was not rewarded by a Python function: resume it without reward_fn")


def _probe_reward(model: GRPOModel, problem) -> None:
    """Call the user's reward once on a right and an empty reply: a broken one stops the run before it writes."""
    model.rewards([problem, problem], [f"{ANSWER_PREFIX} {problem.answer}", ""])


def _plain_copy(policy: nn.Module) -> nn.Module:
    reference = copy.deepcopy(policy)
    unload_lora(reference)
    return reference

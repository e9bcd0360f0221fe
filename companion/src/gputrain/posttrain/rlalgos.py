"""Three ways to turn a scored rollout into a policy update: GRPO, RLOO and PPO, in TRL's names (chapter 13).

Each algorithm answers two questions about the same rollout (N = prompts x G
replies, T reply tokens):

* Which advantage does each token get?  GRPO: the reply's reward against its
  group's (:func:`~gputrain.posttrain.grpo.group_advantages`).  RLOO: the
  reward minus the mean of the *other* replies to the same prompt
  (:func:`rloo_advantages`, as TRL's ``RLOOTrainer``, its KL to the
  reference a penalty on the reward).  PPO: per-token rewards InstructGPT's
  way, the reply's reward on its last token minus ``kl_coef`` times the log
  ratio to the reference on every token (:func:`ppo_token_rewards`), turned
  into advantages by GAE against a learned value model and whitened
  (:func:`ppo_advantages`).
* How does the loss weigh them?  GRPO: TRL's ``loss_type``
  (:func:`~gputrain.posttrain.grpo.grpo_loss`).  RLOO: one clipped ratio per
  reply, of its whole log-probability, averaged over replies
  (:func:`rloo_clipped_loss`, TRL's).  PPO: the per-token clipped surrogate
  plus ``vf_coef`` times the clipped value loss
  (:func:`~gputrain.posttrain.policy_gradient.ppo_loss`).

:func:`algo_advantages` and :func:`algo_loss` dispatch on ``settings.algo``
(:data:`ALGOS`), reading the fields of :class:`~gputrain.posttrain.rl.GRPOSettings`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .grpo import group_advantages, grpo_loss
from .kl import kl_k3
from .policy_gradient import clip_fraction, gae, leave_one_out_baseline, ppo_loss, whiten

ALGOS = {
    "grpo": "group-relative advantages, TRL's GRPO loss types, no value model",
    "rloo": "leave-one-out baseline, one clipped ratio per reply (TRL's RLOOTrainer)",
    "ppo": "a value model, per-token KL-penalised rewards, GAE and PPO-clip (InstructGPT)",
}
NORMALISE_EPS = 1e-4  # TRL's RLOO adds it to the std when it normalises advantages


def rloo_advantages(rewards, group_size: int, *, kl=None, beta: float = 0.0, normalize: bool = False):
    """TRL RLOOTrainer's advantages (N,): reward - beta * KL, minus the mean of the prompt's other replies.

    ``kl`` (N,): each reply's summed k1 log ratio to the reference, log pi_old -
    log pi_ref over its tokens (used when ``beta`` > 0).  ``normalize``:
    shift and scale the batch's advantages to mean 0, std 1 (std + 1e-4).
    """
    rewards = torch.as_tensor(rewards, dtype=torch.float64)
    if beta:
        rewards = rewards - beta * torch.as_tensor(kl, dtype=torch.float64)
    advantages = rewards - leave_one_out_baseline(rewards, group_size)
    if normalize:
        advantages = (advantages - advantages.mean()) / (advantages.std() + NORMALISE_EPS)
    return advantages


def sequence_clip_mask(logps, old_logps, advantages, mask, eps_low: float, eps_high: float):
    """(N,) bool: the replies whose whole-reply ratio is clipped (RLOO clips one ratio per reply)."""
    ratio = torch.exp(((logps - old_logps) * mask).sum(-1)).detach()
    return ((ratio < 1 - eps_low) & (advantages < 0)) | ((ratio > 1 + eps_high) & (advantages > 0))


def rloo_clipped_loss(logps, old_logps, advantages, mask, eps_low: float = 0.2, eps_high: float | None = None):
    """TRL RLOOTrainer's loss: -min(r A, clip(r) A) with r = pi(reply) / pi_old(reply), averaged over replies."""
    eps_high = eps_low if eps_high is None else eps_high
    ratio = torch.exp(((logps - old_logps) * mask).sum(-1))
    advantages = advantages.to(ratio.dtype)
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    return -torch.min(ratio * advantages, clipped * advantages).mean()


def ppo_token_rewards(rewards, logps, ref_logps, mask, kl_coef: float) -> torch.Tensor:
    """(N, T) InstructGPT's per-token reward: -kl_coef (log pi - log pi_ref) on each token, the reward on the last.

    ``logps``: the sampling policy's log-probs of the reply, ``ref_logps`` the
    reference's; a reply's last token is its last counted one.
    """
    mask = mask.to(logps.dtype)
    per_token = -kl_coef * (logps - ref_logps).detach() * mask
    last = (mask.sum(-1).long() - 1).clamp(min=0)
    rows = torch.arange(per_token.size(0), device=per_token.device)
    per_token[rows, last] += torch.as_tensor(rewards, dtype=per_token.dtype, device=per_token.device)
    return per_token * mask


def ppo_advantages(token_rewards, values, mask, gamma: float = 1.0, lam: float = 0.95):
    """GAE advantages, whitened over the batch's tokens, and the returns the value model learns: (N, T) each."""
    advantages, returns = gae(token_rewards, values, mask, gamma, lam)
    return whiten(advantages, mask), returns


def algo_advantages(s, rewards, mask, old_logps, ref_logps=None, values=None):
    """The advantages ``s.algo`` gives a scored rollout, and PPO's returns (None otherwise)."""
    if s.algo == "grpo":
        return group_advantages(rewards, s.group_size, s.scale_rewards), None
    if s.algo == "rloo":
        kl = ((old_logps - ref_logps) * mask).sum(-1) if s.beta else None
        return rloo_advantages(rewards, s.group_size, kl=kl, beta=s.beta, normalize=s.normalize_advantages), None
    token_rewards = ppo_token_rewards(rewards, old_logps, ref_logps, mask, s.kl_coef)
    return ppo_advantages(token_rewards, values, mask, s.gamma, s.lam)


class AlgoLoss(NamedTuple):
    """One step's loss and what it hides: the share of clipped tokens and PPO's value loss (None otherwise)."""

    loss: torch.Tensor
    clip_fraction: float
    value_loss: float | None


def algo_loss(s, logps, old_logps, mask, advantages, ref_logps=None, values=None, old_values=None, returns=None):
    """The loss ``s.algo`` takes on a scored rollout: ``logps`` (N, T) with gradient, ``values`` too for PPO."""
    eps_high = s.epsilon_high or s.epsilon
    mask = mask.to(logps.dtype)
    if s.algo == "grpo":
        adv = advantages.to(logps.dtype)
        loss = grpo_loss(logps, mask, adv, old_logps, ref_logps, loss_type=s.loss_type, epsilon=s.epsilon,
                         epsilon_high=eps_high, beta=s.beta, max_length=s.max_new_tokens)  # fmt: skip
        return AlgoLoss(loss, clip_fraction(logps, old_logps, adv, mask, s.epsilon, eps_high), None)
    if s.algo == "rloo":
        loss = rloo_clipped_loss(logps, old_logps, advantages, mask, s.epsilon, eps_high)
        clipped = sequence_clip_mask(logps, old_logps, advantages.to(logps.dtype), mask, s.epsilon, eps_high)
        share = float((clipped[:, None] * mask).sum() / mask.sum().clamp(min=1.0))
        return AlgoLoss(loss, share, None)
    out = ppo_loss(logps, old_logps, advantages, mask, values, old_values, returns, eps=s.epsilon,
                   eps_high=eps_high, value_clip=s.cliprange_value, vf_coef=s.vf_coef)  # fmt: skip
    return AlgoLoss(out.total, out.clip_fraction, float(out.value.detach()))


def mean_kl(logps, ref_logps, mask) -> float:
    """The mean k3 estimate of KL(policy || reference) over the counted tokens (TRL's logged ``kl``)."""
    mask = mask.to(logps.dtype)
    return float((kl_k3(logps.detach(), ref_logps) * mask).sum() / mask.sum().clamp(min=1.0))

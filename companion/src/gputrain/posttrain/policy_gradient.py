"""Policy-gradient losses from scratch: REINFORCE with a baseline, RLOO, and PPO-clip with GAE (chapter 13).

Every loss here takes per-token log-probabilities of sampled replies, (B, T),
with a mask (B, T) that is 1 on the reply's tokens and 0 on padding, and
returns a scalar whose gradient is the policy-gradient estimate.

* REINFORCE (Williams, 1992): -(R - b) log pi(reply).  Any baseline b that does
  not depend on the reply leaves the gradient unbiased and can cut its variance.
* RLOO (Ahmadian et al., 2024): the baseline of each of a prompt's G samples is
  the mean reward of the *other* G - 1, so it never depends on the sample itself.
* PPO (Schulman et al., 2017): the ratio r = pi / pi_old of the new policy to the
  one that sampled, clipped to [1 - eps_low, 1 + eps_high] so that one batch
  cannot move the policy far; a value model gives per-token advantages by GAE
  (Schulman et al., 2016) and is trained with its own clipped loss.

How a per-token loss becomes one number is a choice of its own
(:data:`NORMALISATIONS`); the GRPO family (:mod:`~gputrain.posttrain.grpo`)
differs mostly in that choice.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


def _check_mask(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    if values.dim() != 2 or mask.shape != values.shape:
        raise ValueError(
            f"per-token values must be (B, T) with a mask of the same shape; got {tuple(values.shape)} "
            f"and {tuple(mask.shape)}"
        )
    return mask.to(values.dtype)


def _sequence(per_token, mask, **_):
    """Each reply's token mean, then the mean over replies: a long reply's tokens count less each."""
    return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()


def _token(per_token, mask, **_):
    """The mean over every counted token of the batch."""
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0)


def _constant(per_token, mask, max_length=None, **_):
    """The sum divided by B times a fixed length: no term depends on how long the replies came out."""
    if not max_length or max_length < 1:
        raise ValueError("the constant normalisation needs max_length, the longest reply allowed (>= 1)")
    return (per_token * mask).sum() / (per_token.size(0) * max_length)


def _items(per_token, mask, num_items=None, **_):
    """The sum divided by the counted tokens of the whole generation batch (``num_items``)."""
    if num_items is None:
        raise ValueError("the items normalisation needs num_items, the counted tokens of the generation batch")
    return (per_token * mask).sum() / torch.as_tensor(num_items, dtype=per_token.dtype).clamp(min=1.0)


def _sum(per_token, mask, **_):
    """Each reply's token sum (its whole log-probability), then the mean over replies: REINFORCE as written."""
    return (per_token * mask).sum(-1).mean()


NORMALISATIONS = {"sequence": _sequence, "token": _token, "constant": _constant, "items": _items, "sum": _sum}


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, how: str = "sequence", **sizes) -> torch.Tensor:
    """A per-token loss (B, T) as one number, by the normalisation ``how`` (a key of :data:`NORMALISATIONS`).

    ``sizes``: ``max_length`` for "constant", ``num_items`` for "items".
    """
    if how not in NORMALISATIONS:
        raise ValueError(f"unknown normalisation {how!r}; use one of: {', '.join(NORMALISATIONS)}")
    return NORMALISATIONS[how](per_token, _check_mask(per_token, mask), **sizes)


def reinforce_loss(logps, mask, rewards, baseline=0.0, how: str = "sum", **sizes) -> torch.Tensor:
    """REINFORCE with a baseline: the mean of -(R - b) log pi over the batch.

    ``rewards`` (B,) one per reply; ``baseline`` a number or (B,) that must not
    depend on the reply it is subtracted from (it is detached).  ``how``: the
    normalisation (default "sum": each reply's whole log-probability).
    """
    advantages = (torch.as_tensor(rewards, dtype=logps.dtype) - torch.as_tensor(baseline, dtype=logps.dtype)).detach()
    return aggregate(-advantages[:, None] * logps, mask, how, **sizes)


def group_view(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Rewards (B,) as (B / G, G), one row per prompt: a prompt's G samples are consecutive rows."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2:
        raise ValueError(f"a group needs at least 2 samples of one prompt; got group_size={group_size!r}")
    if rewards.dim() != 1 or rewards.numel() % group_size:
        raise ValueError(
            f"rewards must be (B,) with B a multiple of group_size {group_size}; got {tuple(rewards.shape)}"
        )
    return rewards.view(-1, group_size)


def leave_one_out_baseline(rewards, group_size: int) -> torch.Tensor:
    """RLOO's baseline (B,): for each sample, the mean reward of the other samples of its prompt."""
    grouped = group_view(torch.as_tensor(rewards), group_size)
    return ((grouped.sum(-1, keepdim=True) - grouped) / (group_size - 1)).flatten()


def rloo_loss(logps, mask, rewards, group_size: int, how: str = "sum", **sizes) -> torch.Tensor:
    """REINFORCE with the leave-one-out baseline (RLOO); prompts' samples are consecutive rows."""
    rewards = torch.as_tensor(rewards, dtype=logps.dtype)
    return reinforce_loss(logps, mask, rewards, leave_one_out_baseline(rewards, group_size), how, **sizes)


def clipped_surrogate(logps, old_logps, advantages, eps_low: float = 0.2, eps_high: float | None = None):
    """PPO's per-token loss -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A), r = exp(logps - old_logps).

    ``advantages``: (B,) one per reply or (B, T) per token.  ``eps_high``
    None: the same as ``eps_low`` (DAPO raises it to let rare tokens grow).
    """
    eps_high = eps_low if eps_high is None else eps_high
    advantages = advantages[:, None] if advantages.dim() == 1 else advantages
    ratio = torch.exp(logps - old_logps)
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    return -torch.min(ratio * advantages, clipped * advantages)


def clip_fraction(logps, old_logps, advantages, mask, eps_low: float = 0.2, eps_high: float | None = None) -> float:
    """The share of counted tokens whose clip is active (the gradient through them is zero)."""
    eps_high = eps_low if eps_high is None else eps_high
    advantages = advantages[:, None] if advantages.dim() == 1 else advantages
    ratio = torch.exp(logps - old_logps).detach()
    active = ((ratio < 1 - eps_low) & (advantages < 0)) | ((ratio > 1 + eps_high) & (advantages > 0))
    m = _check_mask(ratio, mask)
    return float((active.to(m.dtype) * m).sum() / m.sum().clamp(min=1.0))


def gae(rewards, values, mask, gamma: float = 1.0, lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation: per-token advantages and returns (B, T) of right-padded replies.

    delta_t = r_t + gamma V_{t+1} - V_t, with V after a reply's last token 0;
    A_t = delta_t + gamma lam A_{t+1}.  Returns (advantages, advantages + values),
    both 0 on padding and detached.
    """
    m = _check_mask(values, mask)
    rewards, values = rewards.detach() * m, values.detach() * m
    advantages = torch.zeros_like(values)
    next_value = torch.zeros_like(values[:, 0])
    running = torch.zeros_like(values[:, 0])
    for t in reversed(range(values.size(1))):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        running = (delta + gamma * lam * running) * m[:, t]
        advantages[:, t] = running
        next_value = values[:, t]
    return advantages, (advantages + values) * m


def whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``x`` shifted and scaled to mean 0 and variance 1 over its counted tokens (PPO's advantage whitening)."""
    m = _check_mask(x, mask)
    mean = (x * m).sum() / m.sum()
    var = (((x - mean) * m) ** 2).sum() / m.sum()
    return (x - mean) * torch.rsqrt(var + eps) * m


class PPOLoss(NamedTuple):
    """PPO's loss and its parts: ``total`` = ``policy`` + vf_coef * ``value``."""

    total: torch.Tensor
    policy: torch.Tensor
    value: torch.Tensor
    clip_fraction: float


def ppo_loss(logps, old_logps, advantages, mask, values, old_values, returns, *, eps: float = 0.2,
             value_clip: float = 0.2, vf_coef: float = 0.1, eps_high: float | None = None) -> PPOLoss:  # fmt: skip
    """PPO-clip with a clipped value loss, each a mean over counted tokens.

    The value loss is 0.5 max((V - R)^2, (V_clip - R)^2) with V_clip =
    V_old + clip(V - V_old, -value_clip, value_clip): the value model, too,
    cannot move far from the one that scored the rollout.  ``eps_high``:
    the clip's upper side (None: ``eps``).
    """
    advantages, returns = advantages.detach(), returns.detach()
    policy = aggregate(clipped_surrogate(logps, old_logps, advantages, eps, eps_high), mask, "token")
    v_clipped = old_values + torch.clamp(values - old_values, -value_clip, value_clip)
    per_token_value = 0.5 * torch.max((values - returns) ** 2, (v_clipped - returns) ** 2)
    value = aggregate(per_token_value, mask, "token")
    fraction = clip_fraction(logps, old_logps, advantages, mask, eps, eps_high)
    return PPOLoss(policy + vf_coef * value, policy, value, fraction)

"""What one RL step records beside its loss: the quantities that show progress where the loss cannot (chapter 13).

An RL loss is no progress signal: with group-normalised advantages its mean
is near 0 whatever the policy learns, and a batch whose groups all score
alike gives exactly 0.  :func:`step_record` keeps, per step, what does show
progress and its failure modes, under the names TRL logs where it has them:

* ``reward``, ``reward_std``: the mean reward and its spread over replies;
* ``zero_groups``: the share of prompts whose G replies scored alike
  (zero advantage: they teach nothing; None for G = 1, PPO's one reply);
* ``length``, ``length_wrong``, ``length_right``: mean reply tokens, over all
  replies, those with reward <= 0 and those with reward > 0 (None where
  there are none): GRPO's length bias grows the wrong ones;
* ``entropy``: the mean entropy of the policy's next-token distribution over
  reply tokens (a collapsing policy stops exploring);
* ``clip_fraction``: the share of reply tokens whose ratio the clip stopped;
* ``kl``: the mean k3 estimate of KL(policy || reference) (None without a
  reference); ``value_loss`` for PPO (None otherwise);
* ``rollout_seconds`` (sampling; 0 on a step that reuses its cycle's
  rollout), ``score_seconds`` (grading, the reference's and the old
  values' passes, advantages), ``learn_seconds`` (the learner's passes through the backward pass;
  the model fills it in when backward ends), ``tokens`` (sampled reply
  tokens the learner scored) and ``fresh`` (whether the step sampled).
"""

from __future__ import annotations

import torch

HISTORY_KEYS = (
    "loss", "reward", "reward_std", "zero_groups", "length", "length_wrong", "length_right", "entropy",
    "clip_fraction", "kl", "value_loss", "rollout_seconds", "score_seconds", "learn_seconds", "tokens", "fresh",
)  # fmt: skip


def _mean_or_none(values: torch.Tensor) -> float | None:
    return float(values.double().mean()) if values.numel() else None


def step_record(rewards, lengths, group_size: int, entropy, mask, **measured) -> dict:
    """One step's record (:data:`HISTORY_KEYS`) from the rollout's rewards (N,), lengths (N,) and entropies (N, T).

    ``measured``: the values the step measured itself (``loss``,
    ``clip_fraction``, ``kl``, ``value_loss``, ``rollout_seconds``,
    ``learn_seconds``, ``fresh``).
    """
    rewards = torch.as_tensor(rewards, dtype=torch.float64).cpu()
    lengths = torch.as_tensor(lengths).cpu()
    mask = mask.to(entropy.dtype)
    grouped = rewards.view(-1, group_size)
    record = dict(
        reward=float(rewards.mean()),
        reward_std=float(rewards.std()) if rewards.numel() > 1 else 0.0,
        zero_groups=float((grouped.std(1) == 0).double().mean()) if group_size > 1 else None,
        length=float(lengths.double().mean()),
        length_wrong=_mean_or_none(lengths[rewards <= 0]),
        length_right=_mean_or_none(lengths[rewards > 0]),
        entropy=float((entropy.detach() * mask).sum() / mask.sum().clamp(min=1.0)),
        tokens=int(lengths.sum()),
    )
    record.update(measured)
    return {key: record.get(key) for key in HISTORY_KEYS}

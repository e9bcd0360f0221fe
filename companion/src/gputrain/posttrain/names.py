"""What others call GRPO, in TRL's names: each anchor's settings as a ``GRPOConfig`` and as this package's calls.

"GRPO" names a family.  The rows of :data:`NAME_MAP` translate the settings of
four codebases and one paper into TRL 1.16's ``GRPOConfig`` fields (``trl``)
and into this package's functions (``advantages`` for
:func:`~gputrain.posttrain.grpo.group_advantages`, then either ``grpo`` for
:func:`~gputrain.posttrain.grpo.grpo_loss` or ``reinforce`` for
:func:`~gputrain.posttrain.policy_gradient.reinforce_loss`).  ``differs``
says, where it is so, what TRL cannot express; the tests check every row
against TRL's own loss.  Sources, read for this table (December 2026):

* nanochat ``scripts/chat_rl.py`` (Karpathy): its docstring puts "GRPO" in
  quotes: on-policy, no ratio, clip or KL, the group mean as the only baseline,
  token-level normalisation per micro-batch.
* MiniMind ``trainer/train_grpo.py`` (``--loss_type grpo``): population std
  (``unbiased=False``) + 1e-4, per-reply token mean, k3 KL with beta 0.1.  Its
  default, ``--loss_type cispo``, also averages per reply, where TRL's cispo
  divides by the batch's tokens: that one has no exact TRL name.
* Stanford CS336 assignment 5: ``compute_group_normalized_rewards`` with
  ``advantage_eps`` (the handout suggests 1e-6) and ``torch.std``; loss types
  ``reinforce_with_baseline`` and ``grpo_clip`` (cliprange 0.2); ``masked_mean``
  per reply, or ``masked_normalize`` by a constant for the Dr. GRPO variant.
* DeepSeekMath (Shao et al., 2024), eq. 3 and section 4.1: group-normalised
  outcome rewards, per-reply token mean, k3 KL with beta 0.04, one policy
  update per sampling (so the ratio is 1 and the clip never acts).
"""

from __future__ import annotations

import torch

from .grpo import group_advantages, grpo_loss
from .policy_gradient import reinforce_loss

NAME_MAP = {
    "nanochat": dict(
        calls_it="GRPO",
        advantages=dict(scale="none"),
        reinforce=dict(how="token"),
        trl=dict(loss_type="bnpo", scale_rewards="none", beta=0.0),
        differs="the logged value: TRL's is -sum(A)/N at ratio 1, nanochat's -sum(A log pi)/N (same gradient)",
    ),
    "minimind": dict(
        calls_it="GRPO (--loss_type grpo)",
        advantages=dict(scale="group", unbiased=False),
        grpo=dict(loss_type="grpo", epsilon=0.2, beta=0.1, bias_correction_kl=False),
        trl=dict(loss_type="grpo", scale_rewards="group", beta=0.1, epsilon=0.2, use_bias_correction_kl=False),
        differs="population std: MiniMind's advantages are sqrt(G / (G - 1)) times TRL's (up to the 1e-4)",
    ),
    "cs336_reinforce_with_baseline": dict(
        calls_it="reinforce_with_baseline",
        advantages=dict(scale="group", eps=1e-6),
        reinforce=dict(how="sequence"),
        trl=dict(loss_type="grpo", scale_rewards="group", beta=0.0),
        differs="advantage_eps 1e-6 (TRL: 1e-4), and the logged value (same gradient)",
    ),
    "cs336_grpo_clip": dict(
        calls_it="grpo_clip",
        advantages=dict(scale="group", eps=1e-6),
        grpo=dict(loss_type="grpo", epsilon=0.2, beta=0.0),
        trl=dict(loss_type="grpo", scale_rewards="group", beta=0.0, epsilon=0.2),
        differs="advantage_eps 1e-6 (TRL: 1e-4)",
    ),
    "cs336_dr_grpo": dict(
        calls_it="grpo_clip, normalize_by_std=False, masked_normalize by the longest reply allowed",
        advantages=dict(scale="none"),
        grpo=dict(loss_type="dr_grpo", epsilon=0.2, beta=0.0),
        trl=dict(loss_type="dr_grpo", scale_rewards="none", beta=0.0, epsilon=0.2),
        differs="",
    ),
    "deepseekmath": dict(
        calls_it="GRPO (outcome supervision)",
        advantages=dict(scale="group"),
        grpo=dict(loss_type="grpo", epsilon=0.2, beta=0.04, bias_correction_kl=False),
        trl=dict(loss_type="grpo", scale_rewards="group", beta=0.04, epsilon=0.2, use_bias_correction_kl=False),
        differs="the paper gives no epsilon; on-policy, its clip never acts (0.2 is TRL's default)",
    ),
}


def anchor_advantages(name: str, rewards, group_size: int) -> torch.Tensor:
    """The advantages (B,) the anchor ``name`` of :data:`NAME_MAP` computes from rewards (B,)."""
    if name not in NAME_MAP:
        raise ValueError(f"unknown anchor {name!r}; use one of: {', '.join(NAME_MAP)}")
    return group_advantages(rewards, group_size, **NAME_MAP[name]["advantages"])


def anchor_loss(name: str, logps, mask, advantages, old_logps=None, ref_logps=None, *, max_length=None):
    """The loss the anchor ``name`` computes, from scratch, given its advantages (B,).

    A REINFORCE row is on-policy and ignores ``old_logps`` and ``ref_logps``.
    """
    if name not in NAME_MAP:
        raise ValueError(f"unknown anchor {name!r}; use one of: {', '.join(NAME_MAP)}")
    row = NAME_MAP[name]
    if "reinforce" in row:
        return reinforce_loss(logps, mask, advantages, 0.0, **row["reinforce"])
    return grpo_loss(logps, mask, advantages, old_logps, ref_logps, max_length=max_length, **row["grpo"])

"""Direct preference optimisation from scratch: the sigmoid loss of Rafailov et al. (2023) (chapter 13).

DPO needs no reward model and no sampling: for a prompt with a chosen and a
rejected reply, the policy's implicit reward of a reply is beta times its
log-probability ratio to a frozen reference, and the loss is the
Bradley-Terry negative log-likelihood that the chosen reply wins::

    loss = -log sigmoid(beta * ((log pi(c) - log ref(c)) - (log pi(r) - log ref(r))))

At the start the policy is the reference, every margin is 0 and the loss is
ln 2 exactly: a DPO loss that stays at 0.693 has not moved the policy at all.
A reply's log-probability is the sum of its tokens' (:func:`sequence_logprob`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

DPO_BETA = 0.1  # TRL's DPOConfig default


def sequence_logprob(logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each reply's log-probability (B,): the sum of its counted tokens' log-probs (B, T)."""
    if logps.shape != mask.shape:
        raise ValueError(f"logps and mask must have one shape, got {tuple(logps.shape)} and {tuple(mask.shape)}")
    return (logps * mask.to(logps.dtype)).sum(-1)


def implicit_rewards(logps, ref_logps, beta: float = DPO_BETA) -> torch.Tensor:
    """DPO's implicit reward of each reply (B,): beta (log pi - log ref), detached (for logging)."""
    return (beta * (logps - ref_logps)).detach()


def dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta: float = DPO_BETA) -> torch.Tensor:
    """The sigmoid DPO loss, a mean over pairs: each argument is (B,) reply log-probabilities.

    ``chosen``/``rejected``: the policy's (with gradient); ``ref_chosen``/
    ``ref_rejected``: the frozen reference's.
    """
    if not beta > 0:
        raise ValueError(f"DPO's beta must be > 0 (the strength of the pull to the reference), got {beta}")
    margin = (chosen - ref_chosen) - (rejected - ref_rejected)
    return -F.logsigmoid(beta * margin).mean()

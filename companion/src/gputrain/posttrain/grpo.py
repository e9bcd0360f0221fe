"""The GRPO family in TRL's names: group advantages, loss types grpo/dr_grpo/dapo/bnpo, k3 KL (chapter 13).

GRPO (Shao et al., DeepSeekMath, 2024) drops PPO's value model: a prompt gets G
sampled replies, and a reply's advantage is its reward against the group's
(:func:`group_advantages`).  The loss is PPO's clipped surrogate with that one
advantage on every token, plus beta times the k3 estimate of KL(policy ||
reference) per token (:func:`~gputrain.posttrain.kl.kl_k3`).

The variants that followed differ in two knobs, and this module names them as
TRL 1.16's ``GRPOConfig`` does, so that the same settings give the same loss:

* ``scale_rewards``: "group" divides by the group's std (+ 1e-4), "batch" by the
  whole batch's, "none" only subtracts the group mean (Dr. GRPO: the std
  scaling over-weights prompts that are nearly always right or wrong).
* ``loss_type``: how per-token losses become one number (:data:`LOSS_TYPES`):
  grpo averages each reply's tokens first, so a long wrong reply is penalised
  less per token (the length bias Dr. GRPO removes with a constant); bnpo and
  dapo average over the batch's tokens.

``epsilon`` and ``epsilon_high`` are the clip's low and high sides (DAPO's
"clip-higher"), and ``bias_correction_kl`` multiplies the KL term by the
ratio pi / pi_old, as TRL's ``use_bias_correction_kl`` does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .kl import kl_k3
from .policy_gradient import aggregate, clipped_surrogate, group_view

# TRL's loss_type -> this package's normalisation (gputrain.posttrain.policy_gradient.NORMALISATIONS)
LOSS_TYPES = {"grpo": "sequence", "bnpo": "token", "dr_grpo": "constant", "dapo": "items"}
SCALE_REWARDS = ("group", "batch", "none")
ADVANTAGE_EPS = 1e-4  # added to the std before dividing (TRL's and DeepSeekMath's implementations)


def _std(x: torch.Tensor, dim, unbiased: bool) -> torch.Tensor:
    return x.std(dim=dim, keepdim=True, correction=1 if unbiased else 0)


def group_advantages(
    rewards, group_size: int, scale: str = "group", *, eps: float = ADVANTAGE_EPS, unbiased: bool = True
) -> torch.Tensor:
    """Each reply's advantage (B,): its reward minus its group's mean, divided by a std unless ``scale`` is "none".

    ``scale``: "group" (the group's std), "batch" (the whole batch's std) or
    "none", as TRL's ``scale_rewards``.  ``eps`` is added to the std;
    ``unbiased`` uses the G - 1 denominator (TRL) or G (``unbiased=False``).
    The G samples of a prompt are consecutive rows.  A group whose replies
    all score alike gets advantage 0 on every reply: it teaches nothing.
    """
    if scale not in SCALE_REWARDS:
        raise ValueError(f"unknown scale {scale!r}; use one of: {', '.join(SCALE_REWARDS)}")
    rewards = torch.as_tensor(rewards)
    rewards = rewards if rewards.is_floating_point() else rewards.double()
    grouped = group_view(rewards, group_size)  # (B / G, G)
    centred = (grouped - grouped.mean(-1, keepdim=True)).flatten()
    if scale == "none":
        return centred
    std = _std(grouped, -1, unbiased).expand_as(grouped).flatten() if scale == "group" else _std(rewards, 0, unbiased)
    return centred / (std + eps)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / temperature) at ``tokens``: (B, T, V) and (B, T) -> (B, T)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 to score tokens, got {temperature}")
    logp = F.log_softmax(logits / temperature if temperature != 1.0 else logits, dim=-1)
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def completion_logprobs(model, prompt_ids, completion_ids, temperature: float = 1.0) -> torch.Tensor:
    """The log-probability (B, T) the model gives each completion token after its prompt.

    ``model``: a callable from ids (B, L) to logits (B, L, V), or to a tuple
    whose first item is the logits (the book's GPT).  Prompts of one length
    (B, P); the completion's token t is scored by the logits at P - 1 + t.
    """
    ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (B, P + T)
    out = model(ids)
    logits = out[0] if isinstance(out, tuple) else out
    P, T = prompt_ids.size(1), completion_ids.size(1)
    return token_logprobs(logits[:, P - 1 : P + T - 1], completion_ids, temperature)


def _check_grpo(loss_type: str, beta: float, ref_logps) -> None:
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"unknown loss_type {loss_type!r}; use one of: {', '.join(LOSS_TYPES)}")
    if not beta >= 0:
        raise ValueError(f"beta must be >= 0 (0: no KL term), got {beta}")
    if beta and ref_logps is None:
        raise ValueError("beta > 0 needs ref_logps, the reference model's log-probs of the same tokens")


def grpo_loss(
    logps,
    mask,
    advantages,
    old_logps=None,
    ref_logps=None,
    *,
    loss_type: str = "dapo",
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    beta: float = 0.0,
    bias_correction_kl: bool = True,
    max_length: int | None = None,
    num_items=None,
) -> torch.Tensor:
    """The GRPO-family loss of one batch, as TRL 1.16's ``GRPOTrainer`` computes it (defaults are TRL's).

    ``logps`` (B, T): the policy's log-probs of the sampled tokens, with
    gradient; ``mask`` (B, T); ``advantages`` (B,) or (B, T); ``old_logps``:
    the sampling policy's (None: on-policy, ratio 1 with the gradient of
    log pi); ``ref_logps``: the reference's, needed when ``beta`` > 0.
    ``max_length``: the longest reply allowed (dr_grpo); ``num_items``: the
    counted tokens of the generation batch (dapo; None: this batch's).
    """
    _check_grpo(loss_type, beta, ref_logps)
    old_logps = logps.detach() if old_logps is None else old_logps
    per_token = clipped_surrogate(logps, old_logps, advantages, epsilon, epsilon_high)
    if beta:
        kl = kl_k3(logps, ref_logps)  # KL(policy || reference), estimated on the policy's samples
        if bias_correction_kl:
            kl = kl * torch.exp(logps - old_logps)  # the samples came from pi_old: importance-weight them
        per_token = per_token + beta * kl
    if loss_type == "dapo" and num_items is None:
        num_items = mask.sum()
    return aggregate(per_token, mask, LOSS_TYPES[loss_type], max_length=max_length, num_items=num_items)

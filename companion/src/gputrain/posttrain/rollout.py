"""Rollouts: G sampled replies per prompt, with every sampled token's log-prob, masks and the time (chapter 13).

Reinforcement learning alternates two phases.  A rollout samples replies
from the current policy; a learner step scores them and moves the policy.
:func:`rollout` is the first phase, on chapter 12's batched generation with
the KV cache (:func:`gputrain.posttrain.generation.decode`): each prompt is
asked ``group_size`` times (GRPO's group; PPO and REINFORCE use 1), each
sample from its own seeded generator, each reply stopped at ``stop``
(``<|end|>`` for a chat model), which is kept as its last token because
stopping is a choice the policy is trained on, as TRL's completion mask does.

While sampling, each chosen token's log-probability under the distribution
it was drawn from is kept: GRPO's and PPO's ratio pi / pi_old needs the
old policy's log-probs, and a rollout gets them for free.  At temperature 1
(no top-k) they equal the log-probs of one teacher-forced forward pass over
prompt and reply (:func:`policy_logprobs`, the learner's pass, with
gradient) up to float32 rounding: the KV cache computes the same sums in
another order.  With a ``top_k`` cut they are the truncated distribution's,
which a teacher-forced pass does not reproduce.

Rows are prompt-major, row ``i * G + j`` being sample j of prompt i, the
layout :func:`~gputrain.posttrain.grpo.group_advantages` reads.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

import torch

from ..model import GPT
from .generation import check_sampling, decode
from .grpo import token_logprobs

PAD = 0  # the id after a reply's end: masked out, and never seen by the reply (attention is causal)


@dataclass
class Rollout:
    """G replies to each of a batch of prompts, as the learner needs them (N = prompts x G rows)."""

    prompts: list[list[int]]  # (N,) each row's prompt ids: row i * G + j asks prompt i
    completions: torch.Tensor  # (N, T) long: the sampled ids, the stop token included where reached, PAD after
    logps: torch.Tensor  # (N, T) float: each sampled id's log-prob under the sampling policy, 0 at pads
    mask: torch.Tensor  # (N, T) float: 1 on sampled ids (stop included), 0 on pads
    stopped: torch.Tensor  # (N,) bool: the reply ended at the stop token (else at max_new_tokens or the context)
    group_size: int
    stop: int
    temperature: float
    seconds: float  # wall time of sampling, the prompts' forward passes included

    @property
    def tokens(self) -> int:
        """Sampled tokens, the stop tokens included."""
        return int(self.mask.sum())

    @property
    def lengths(self) -> torch.Tensor:
        """(N,) each reply's sampled tokens, its stop token included."""
        return self.mask.sum(1).long()

    def replies(self) -> list[list[int]]:
        """Each row's reply ids without its stop token (what :func:`generate_replies` returns)."""
        out = []
        for ids, n, end in zip(self.completions.tolist(), self.lengths.tolist(), self.stopped.tolist()):
            out.append(ids[: n - 1] if end else ids[:n])
        return out


def check_rollout(group_size: int, temperature: float) -> None:
    """Refuse a rollout that cannot train a policy, with one line that names the fix."""
    if not (isinstance(group_size, int) and group_size >= 1):
        raise ValueError(f"group_size must be an integer >= 1 (GRPO needs >= 2), got {group_size!r}")
    if not temperature > 0:
        raise ValueError(
            f"a rollout samples: temperature must be > 0, got {temperature} (greedy replies have log-prob 0 "
            "and nothing to explore); use 1.0"
        )


def rollout(
    model: GPT,
    prompts: Sequence[Sequence[int]],
    *,
    group_size: int,
    stop: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
    max_new_tokens: int = 32,
    batch_size: int = 64,
) -> Rollout:
    """Sample ``group_size`` replies to each prompt with the KV cache, keeping every sampled token's log-prob.

    Sampling is :func:`~gputrain.posttrain.generation.decode`'s: prompts are
    grouped by length (nothing is padded), each sample draws from its own
    generator seeded by ``seed``, its prompt and its sample number, so a
    reply does not depend on the batch it ran in.  A reply ends at ``stop``
    (kept, masked in), after ``max_new_tokens``, or where the context is
    full.  ``seed`` should change every step, or each step redraws the
    same replies for the same prompts.  The model runs in eval mode, without
    gradient, and is left as it was.  The tensors are on the model's device.
    """
    check_rollout(group_size, temperature)
    check_sampling(temperature, top_k, group_size, max_new_tokens)
    start = time.perf_counter()
    traces = decode(
        model,
        prompts,
        stop=stop,
        samples=group_size,
        temperature=temperature,
        top_k=top_k,
        seed=seed,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        logprobs=True,
    )
    seconds = time.perf_counter() - start  # decode reads every token back to the host: no queued work is left
    rows = [trace for row in traces for trace in row]  # prompt-major
    p = next(model.parameters())
    ids, logps, mask = (t.to(p.device) for t in _padded(rows, torch.promote_types(p.dtype, torch.float32)))
    stopped = torch.tensor([bool(t[0]) and t[0][-1] == stop for t in rows], device=p.device)
    owners = [list(map(int, p)) for p in prompts for _ in range(group_size)]
    return Rollout(owners, ids, logps, mask, stopped, group_size, stop, temperature, seconds)


def _padded(rows, dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, log-probs) of varying lengths as three (N, T) tensors: ids, log-probs, mask; PAD and 0 after each end."""
    lengths = [len(tokens) for tokens, _ in rows]
    width = max(lengths)
    ids = torch.tensor([[*tokens, *[PAD] * (width - n)] for (tokens, _), n in zip(rows, lengths)], dtype=torch.long)
    logps = torch.tensor([[*scores, *[0.0] * (width - n)] for (_, scores), n in zip(rows, lengths)], dtype=dtype)
    mask = (torch.arange(width) < torch.tensor(lengths)[:, None]).to(torch.get_default_dtype())  # 1 on sampled ids
    return ids, logps, mask


def policy_logprobs(model: GPT, ro: Rollout, temperature: float | None = None, *, entropy: bool = False):
    """The log-prob (N, T) ``model`` gives each sampled token by one teacher-forced pass: the learner's, with gradient.

    Rows are grouped by prompt length, so nothing is left-padded (the GPT's
    positions are absolute and it has no padding mask); each group runs as
    prompt followed by its replies, whose pads come after the reply and so
    never reach it.  The reply's last token is scored, never fed back, so a
    reply that fills the context still fits.  ``temperature`` (default: the
    rollout's) divides the logits, as the sampler did.  Pads score 0.
    ``entropy``: also return (N, T) the entropy of the whole next-token
    distribution at each reply position, from the same logits (no second
    pass), detached: a policy that stops exploring shows it here first.
    """
    temperature = ro.temperature if temperature is None else temperature
    T = ro.completions.size(1)
    pieces, spreads, order = [], [], []
    for rows, inputs, reply, P in teacher_forced(ro, model.cfg.block_size, next(model.parameters()).device):
        logits, _ = model(inputs)  # (b, P + width - 1, V)
        scored = token_logprobs(logits[:, P - 1 :], reply, temperature)  # (b, width)
        pieces.append(torch.nn.functional.pad(scored, (0, T - reply.size(1))))
        if entropy:
            spread = _entropy(logits[:, P - 1 :].detach(), temperature)
            spreads.append(torch.nn.functional.pad(spread, (0, T - reply.size(1))))
        order += rows
    back = torch.argsort(torch.tensor(order, device=pieces[0].device))  # back to the rollout's rows
    mask = ro.mask.to(device=pieces[0].device, dtype=pieces[0].dtype)
    out = torch.cat(pieces)[back] * mask
    return (out, torch.cat(spreads)[back] * mask) if entropy else out


def teacher_forced(ro: Rollout, block_size: int, device):
    """Each group of rows that share a prompt length: (rows, prompt + reply[:-1] ids, reply ids, prompt length).

    The reply's token t is read at position P - 1 + t of the inputs; replies
    are cut to what fits the context (the sampler stopped there).
    """
    by_length: dict[int, list[int]] = defaultdict(list)
    for r, p in enumerate(ro.prompts):
        by_length[len(p)].append(r)
    for P, rows in sorted(by_length.items()):
        width = min(ro.completions.size(1), block_size - P + 1)  # no reply to this prompt is longer
        prompt = torch.tensor([ro.prompts[r] for r in rows], dtype=torch.long, device=device)  # (b, P)
        reply = ro.completions[rows, :width].to(device)  # (b, width)
        yield rows, torch.cat([prompt, reply[:, :-1]], dim=1), reply, P


def _entropy(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """(b, T) the entropy in nats of softmax(logits / temperature) at each position."""
    with torch.no_grad():
        logp = torch.log_softmax(logits / temperature, dim=-1)
        return -(logp.exp() * logp).sum(-1)

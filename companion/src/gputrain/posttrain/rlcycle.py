"""A scored rollout, and the buffers that keep it through ``num_iterations`` optimizer steps (chapter 13).

A rollout costs most of an RL step (chapter 13 measures how much), so PPO and
TRL's ``num_iterations`` reuse one for several optimizer steps: the policy
moves after the first, its ratio to the sampling policy pi_old leaves 1, and
the clip starts to act.  :class:`Scored` is what a rollout becomes once
graded: rewards, advantages, the reference's log-probs and, for PPO, the old
values and returns.

:class:`RolloutStore` holds it in fixed-size buffers of the model, so that a
checkpoint written in the middle of a cycle carries the rollout the next
steps reuse, and a resume takes exactly the steps the uninterrupted run
takes: the run reads every step's batch back from the store, fresh or not,
so both go through the same numbers.  The store's shape is fixed by the
batch (``batch_size`` problems x ``group_size`` replies) and
``max_new_tokens``; a rollout's replies are padded to it and cut back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn as nn

from .rollout import Rollout

_PER_TOKEN = ("ref_logps", "values", "returns")  # optional (N, T) float tensors of a scored rollout


@dataclass
class Scored:
    """One graded rollout as the learner needs it (N = problems x G rows, T reply tokens)."""

    indices: torch.Tensor  # (B,) long: the problems asked
    rollout: Rollout
    rewards: torch.Tensor  # (N,) float64
    advantages: torch.Tensor  # (N,) float64 (GRPO, RLOO) or (N, T) (PPO)
    ref_logps: Optional[torch.Tensor] = None  # (N, T) the reference's log-probs of the replies
    values: Optional[torch.Tensor] = None  # (N, T) the value model's, when the rollout was scored (PPO)
    returns: Optional[torch.Tensor] = None  # (N, T) GAE's returns, the value model's targets (PPO)


class RolloutStore(nn.Module):
    """The current cycle's :class:`Scored` in buffers (a checkpoint saves them), and the step count."""

    def __init__(self, batch_size: int, group_size: int, max_new_tokens: int, *, per_token_advantages: bool,
                 optional: tuple[str, ...] = ()):  # fmt: skip
        super().__init__()
        N, T = batch_size * group_size, max_new_tokens
        self.group_size = group_size
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))  # forward calls so far
        self.register_buffer("width", torch.zeros((), dtype=torch.long))  # the rollout's T
        self.register_buffer("indices", torch.zeros(batch_size, dtype=torch.long))
        self.register_buffer("completions", torch.zeros(N, T, dtype=torch.long))
        self.register_buffer("stopped", torch.zeros(N, dtype=torch.bool))
        for name in ("logps", "mask") + tuple(o for o in _PER_TOKEN if o in optional):
            self.register_buffer(name, torch.zeros(N, T))
        self.register_buffer("rewards", torch.zeros(N, dtype=torch.float64))
        self.register_buffer("advantages", torch.zeros((N, T) if per_token_advantages else N, dtype=torch.float64))
        self.optional = tuple(o for o in _PER_TOKEN if o in optional)

    def fresh(self, num_iterations: int) -> bool:
        """Whether this step samples (the first of a cycle of ``num_iterations``)."""
        return int(self.steps) % num_iterations == 0

    def keep(self, scored: Scored) -> None:
        """Store ``scored`` for this and the cycle's next steps."""
        ro, T = scored.rollout, scored.rollout.completions.size(1)
        if scored.indices.numel() != self.indices.numel() or ro.completions.size(0) != self.completions.size(0):
            raise ValueError(
                f"a cycle's store holds {self.indices.numel()} problems x {self.group_size} replies, "
                f"got {scored.indices.numel()} problems; keep batch_size fixed (the loader drops the last batch)"
            )
        with torch.no_grad():
            self.width.fill_(T)
            self.indices.copy_(scored.indices)
            self.stopped.copy_(ro.stopped)
            self.rewards.copy_(scored.rewards)
            self.completions.zero_()[:, :T] = ro.completions
            self.logps.zero_()[:, :T] = ro.logps
            self.mask.zero_()[:, :T] = ro.mask
            advantages = scored.advantages
            if advantages.dim() == 2:
                self.advantages.zero_()[:, :T] = advantages
            else:
                self.advantages.copy_(advantages)
            for name in self.optional:
                getattr(self, name).zero_()[:, :T] = getattr(scored, name)

    def read(self, prompt_of: Callable[[int], list[int]], stop: int, temperature: float, seconds: float,
             dtype: torch.dtype) -> Scored:  # fmt: skip
        """The stored :class:`Scored`, its rollout's prompts rebuilt by ``prompt_of(problem index)``.

        ``stop``, ``temperature`` and ``seconds`` complete the rollout;
        ``dtype`` is the policy's float type, which per-token tensors are
        given back in (rewards and sequence advantages stay float64).
        """
        T, G = int(self.width), self.group_size
        cut = lambda t: t[:, :T].clone()  # noqa: E731
        prompts = [prompt_of(i) for i in self.indices.tolist() for _ in range(G)]
        ro = Rollout(prompts, cut(self.completions), cut(self.logps).to(dtype), cut(self.mask).to(dtype),
                     self.stopped.clone(), G, stop, temperature, seconds)  # fmt: skip
        adv = self.advantages
        adv = cut(adv).to(dtype) if adv.dim() == 2 else adv.clone()
        extra = {name: cut(getattr(self, name)).to(dtype) for name in self.optional}
        return Scored(self.indices.clone(), ro, self.rewards.clone(), adv, **extra)

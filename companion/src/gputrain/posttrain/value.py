"""PPO's value model: the starting policy's trunk with one number in place of the next-token head (chapter 13).

PPO needs a baseline per token, the reward a reply can still expect from
there: a value model.  InstructGPT and TRL's ``PPOTrainer`` start it from a
trained model's trunk, since the features that predict the next token also
predict how the reply will be judged, and put a scalar head where the
language-model head was.  :class:`ValueModel` copies the policy's GPT (its
LoRA adapters merged), drops the head, and reads each reply position's
final hidden state with a zero-initialised ``nn.Linear(n_embd, 1)``: at step
0 every value is 0, and GAE's first advantages are the rewards themselves.

It doubles what the policy costs in weights, gradients and optimizer state,
which is the memory GRPO and RLOO save by comparing replies instead.
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn

from ..model import GPT
from .lora import unload_lora
from .rollout import Rollout, teacher_forced


class ValueModel(nn.Module):
    """V(prompt, reply[:t]) for every reply token t: a GPT trunk and a scalar head, zero at the start."""

    def __init__(self, policy: GPT):
        super().__init__()
        trunk = copy.deepcopy(policy)
        unload_lora(trunk)  # the merged weights, all trainable
        trunk.head = nn.Identity()  # only the trunk's hidden states are read
        self.trunk = trunk.train()
        self.score = nn.Linear(policy.cfg.n_embd, 1)
        nn.init.zeros_(self.score.weight)
        nn.init.zeros_(self.score.bias)

    def forward(self, ro: Rollout) -> torch.Tensor:
        """(N, T) the value at each reply token's position (read where its logits are), 0 at pads."""
        T, pieces, order = ro.completions.size(1), [], []
        device = self.score.weight.device
        for rows, inputs, reply, P in teacher_forced(ro, self.trunk.cfg.block_size, device):
            values = self.score(self.trunk.hidden(inputs)[:, P - 1 :]).squeeze(-1)  # (b, width)
            pieces.append(nn.functional.pad(values, (0, T - reply.size(1))))
            order += rows
        out = torch.cat(pieces)[torch.argsort(torch.tensor(order, device=device))]
        return out * ro.mask.to(device=device, dtype=out.dtype)

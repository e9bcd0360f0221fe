"""What one RL step does, as settings a checkpoint stores: algorithm, task, group, loss, clip, KL, PPO (chapter 13).

:class:`GRPOSettings` keeps TRL's names where TRL has the knob (``loss_type``,
``scale_rewards``, ``beta``, ``num_iterations``, ``epsilon``,
``epsilon_high``, ``normalize_advantages``; PPO's ``kl_coef``, ``vf_coef``,
``cliprange_value``, ``gamma``, ``lam``), so that a run here reads as a TRL
configuration.  ``gputrain rl`` offers every field as a flag, and a resume
rebuilds the settings from the checkpoint (a field an older checkpoint lacks
takes its default, which is what that version did).
"""

from __future__ import annotations

import dataclasses

from .grpo import LOSS_TYPES, SCALE_REWARDS
from .rlalgos import ALGOS


@dataclasses.dataclass(frozen=True)
class GRPOSettings:
    """What one RL step does, stored in the checkpoint so that a resume does the same."""

    task: str = "arithmetic"  # the task whose train problems are asked
    n_problems: int = 512  # distinct train problems drawn
    digits: int = 2  # the task's difficulty: digits per operand
    ops: str = "+"  # arithmetic's operations, e.g. "+" or "+-*"
    group_size: int = 8  # replies sampled per problem (G; ppo may take 1)
    loss_type: str = "dapo"  # TRL's loss_type: grpo, dr_grpo, dapo or bnpo
    scale_rewards: str = "group"  # TRL's scale_rewards: group, batch or none
    beta: float = 0.0  # the k3 KL penalty's weight towards the reference (0: no reference kept)
    temperature: float = 1.0  # sampling temperature
    max_new_tokens: int = 16  # longest reply
    # algorithm: how rewards become an update, and which reward
    algo: str = "grpo"  # how rewards become a policy update: grpo, rloo or ppo
    reward: str = ""  # module:function or path/to/file.py:function ('': the task's exact grader)
    # clip: optimizer steps per rollout, and the ratio's clip
    num_iterations: int = 1  # optimizer steps per rollout (TRL's name; > 1: the ratio moves and the clip acts)
    epsilon: float = 0.2  # the ratio's clip, low side (TRL's epsilon)
    epsilon_high: float = 0.0  # the clip's high side (0: equal to epsilon; DAPO uses 0.28)
    # rloo and ppo: the advantages' normalisation, the value model, the per-token KL penalty, GAE
    normalize_advantages: bool = False  # rloo: scale the batch's advantages to mean 0, std 1 (TRL's name)
    kl_coef: float = 0.05  # ppo: the per-token KL penalty on the reward (InstructGPT's beta)
    vf_coef: float = 0.1  # ppo: the value loss's weight
    cliprange_value: float = 0.2  # ppo: the value model's clip around its old values
    gamma: float = 1.0  # ppo: GAE's discount
    lam: float = 0.95  # ppo: GAE's lambda

    @property
    def keeps_reference(self) -> bool:
        """A frozen reference is kept for a KL term (beta > 0) and always for PPO's per-token penalty."""
        return self.beta > 0 or self.algo == "ppo"

    def check(self) -> None:
        if self.group_size < (1 if self.algo == "ppo" else 2):  # PPO's value model is its baseline: no group needed
            raise ValueError(
                f"group_size must be >= 2 (advantages compare replies in a group; ppo takes 1), got {self.group_size}"
            )
        if not self.beta >= 0:
            raise ValueError(f"beta must be >= 0, got {self.beta}")
        for name, table in (("algo", ALGOS), ("loss_type", LOSS_TYPES), ("scale_rewards", SCALE_REWARDS)):
            if getattr(self, name) not in table:
                raise ValueError(f"unknown {name} {getattr(self, name)!r}; use one of: {', '.join(table)}")
        if not self.ops or set(self.ops) - set("+-*"):
            raise ValueError(f"ops must be made of + - *, got {self.ops!r}")
        if not self.temperature > 0 or self.max_new_tokens < 1 or self.n_problems < 1:
            raise ValueError("temperature must be > 0, max_new_tokens and n_problems >= 1")
        self._check_update()

    def _check_update(self) -> None:
        if self.num_iterations < 1:
            raise ValueError(f"num_iterations must be >= 1 (optimizer steps per rollout), got {self.num_iterations}")
        if not (0 < self.epsilon < 1 and self.epsilon_high >= 0):
            raise ValueError(
                f"epsilon must be in (0, 1) and epsilon_high >= 0, got {self.epsilon}, {self.epsilon_high}"
            )
        if not (self.kl_coef >= 0 and self.vf_coef >= 0 and self.cliprange_value > 0):
            raise ValueError("kl_coef and vf_coef must be >= 0 and cliprange_value > 0")
        if not (0 <= self.gamma <= 1 and 0 <= self.lam <= 1):
            raise ValueError(f"gamma and lam must be in [0, 1], got {self.gamma}, {self.lam}")
        if self.algo == "ppo" and self.beta:
            raise ValueError(f"ppo's KL penalty is kl_coef, on the reward of each token; leave beta 0, got {self.beta}")
        if self.reward and ":" not in self.reward:
            raise ValueError(f"--reward {self.reward!r} is not module:function; e.g. --reward my_rewards:length")

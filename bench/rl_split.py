"""Where one GRPO step's time goes on this machine: the rollout against the learner (chapter 13).

    OMP_NUM_THREADS=1 python bench/rl_split.py [--steps 6] [--prompts 32] [--group-size 8] [--out FILE]

The model is the size of POSTTRAIN_FACTS.md's RL probe (4 layers x 64, 4
heads) with the chat vocabulary, untrained and seeded; the prompts are
chapter 12's two-digit arithmetic questions as chat turns.  One step is:

* rollout: :func:`gputrain.posttrain.rollout`, ``group_size`` replies to each
  prompt with the KV cache, their log-probs kept;
* rewards: :func:`gputrain.posttrain.task_rewards` (counted with the learner);
* learner: the reference's teacher-forced log-probs (beta > 0), the
  policy's with gradient (:func:`gputrain.posttrain.policy_logprobs`),
  :func:`gputrain.posttrain.grpo_loss` with the rollout's log-probs as
  pi_old, backward, one AdamW step.

An untrained model rarely says ``<|end|>``, so its replies run to
``--new-tokens``: the most a step costs.  Its rewards are all 0 and so are
the advantages; the arithmetic of the loss and its backward is the same.
The first step warms up and is dropped; the median of the rest is printed,
with the FLOPs and bytes :func:`gputrain.posttrain.grpo_step_cost` counts for
the same sizes (fp32), so the two phases can be placed on a roofline.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from gputrain.model import GPT, GPTConfig
from gputrain.posttrain import (
    ChatFormat,
    group_advantages,
    grpo_loss,
    grpo_step_cost,
    policy_logprobs,
    problems,
    reply_text,
    rollout,
    task_rewards,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6, help="GRPO steps; the first warms up (default: 6)")
    ap.add_argument("--prompts", type=int, default=32, help="prompts per step (default: 32)")
    ap.add_argument("--group-size", type=int, default=8, help="replies per prompt (default: 8)")
    ap.add_argument("--new-tokens", type=int, default=12, help="most tokens per reply (default: 12)")
    ap.add_argument("--beta", type=float, default=0.04, help="KL coefficient; > 0 runs the reference (default: 0.04)")
    ap.add_argument("--out", type=Path, default=None, help="also write the result as JSON")
    args = ap.parse_args()
    torch.set_num_threads(1)
    fmt = ChatFormat()
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=fmt.vocab_size, block_size=64, n_layer=4, n_head=4, n_embd=64, dropout=0.0)
    policy, reference = GPT(cfg), GPT(cfg)
    reference.load_state_dict(policy.state_dict())
    reference.eval().requires_grad_(False)
    opt = torch.optim.AdamW(policy.parameters(), lr=3e-4)
    pool = problems("arithmetic", args.prompts * args.steps, split="train", seed=0)
    times = {"rollout": [], "learner": []}
    for step in range(args.steps):
        batch = pool[step * args.prompts : (step + 1) * args.prompts]
        prompts = [fmt.encode_prompt(p.prompt()) for p in batch]
        ro = rollout(
            policy, prompts, group_size=args.group_size, stop=fmt.end_id, max_new_tokens=args.new_tokens, seed=step
        )
        start = time.perf_counter()
        owners = [p for p in batch for _ in range(args.group_size)]
        rewards = task_rewards(owners, [reply_text(fmt, r) for r in ro.replies()])
        advantages = group_advantages(rewards, args.group_size).float()
        with torch.no_grad():
            ref = policy_logprobs(reference, ro) if args.beta else None
        logps = policy_logprobs(policy.train(), ro)
        loss = grpo_loss(logps, ro.mask, advantages, old_logps=ro.logps, ref_logps=ref, beta=args.beta)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times["rollout"].append(ro.seconds)
        times["learner"].append(time.perf_counter() - start)
    report(args, cfg, times, prompt_len=statistics.median(len(p) for p in prompts))


def report(args, cfg, times, prompt_len) -> None:
    rollout_s = statistics.median(times["rollout"][1:])
    learner_s = statistics.median(times["learner"][1:])
    cost = grpo_step_cost(cfg, args.prompts, args.group_size, int(prompt_len), args.new_tokens, 4, args.beta > 0)
    out = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "sizes": {k: getattr(args, k) for k in ("prompts", "group_size", "new_tokens", "beta", "steps")},
        "rollout_s": rollout_s,
        "learner_s": learner_s,
        "rollout_share": rollout_s / (rollout_s + learner_s),
        "every_step": times,
        "counted": {
            phase: {"flops": op.flops, "bytes": op.bytes, "intensity": op.intensity, "achieved_flop_s": op.flops / s}
            for phase, op, s in (("rollout", cost.rollout, rollout_s), ("learner", cost.learner, learner_s))
        },
    }
    print(json.dumps(out, indent=2))
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

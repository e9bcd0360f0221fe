"""What one GRPO step costs on chapter 11's roofline: the rollout's FLOPs and bytes against the learner's (chapter 13).

A rollout decodes one token per sequence per forward pass, and every pass
reads every weight once for the whole batch: S sequences share one read of
W weights, so a decoded token does about 2 S FLOPs per weight read, an
arithmetic intensity of S / itemsize, below a GPU's ridge (peak FLOP/s over
bandwidth, :meth:`gputrain.device.GPUSpec.ridge`) for the batches rollouts run.  The learner runs the
same weights over all S (P + N - 1) tokens of the batch at once, forward and
backward: the intensity grows with the tokens, and the step is matmul-bound.
A bigger rollout batch shares each weight read among more sequences, but
each sequence reads its own cached keys and values, about one FLOP per byte
in 16 bits: past some batch the KV cache, not the weights, sets the
rollout's intensity, and it stays below the ridge.

:func:`grpo_step_cost` counts both with the rules of
:mod:`gputrain.roofline` (one kernel per operation, each input read once and
each output written once), so they can be placed on a
:class:`~gputrain.roofline.Machine`:

* every forward pass over m tokens: :func:`~gputrain.roofline.gpt_matmuls`
  for each of the L blocks, then the LM head (2mkn FLOPs, A, B and C
  through memory once);
* rollout: one prefill pass over the S prompts (S x P tokens), then N - 1
  decode passes of S tokens (the N-th token is chosen, never fed back);
  attention does 4 C FLOPs per layer per (query, key) pair, causal, and a
  decode pass reads the cached keys and values of every earlier token and
  writes its own (2 L C values per token);
* learner: the policy's forward over S (P + N - 1) tokens and its backward
  (twice the forward's FLOPs and bytes: each weight's product is done for
  the input's gradient and for the weight's), the frozen reference's
  forward when beta > 0, and one fused AdamW update of every parameter in
  fp32 (:func:`~gputrain.roofline.adamw_step`); attention does the same
  pairs' FLOPs and moves q, k, v and its output once per pass.

Every reply is counted at its full N tokens: replies that stop early cost
less, so this is the step's most.  LayerNorm, GELU, the embeddings and the
loss are left out: they are small against the matmuls at these sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..memory import shape_of
from ..roofline import OpCost, adamw_step, gpt_matmuls


@dataclass(frozen=True)
class StepCost:
    """FLOPs and bytes of one GRPO step's two phases, and the sizes they were counted for."""

    rollout: OpCost
    learner: OpCost
    sequences: int  # S = prompts x group size
    prompt_len: int  # P
    new_tokens: int  # N

    @property
    def decoded_tokens(self) -> int:
        return self.sequences * self.new_tokens


def forward_cost(cfg, tokens: int, itemsize: int = 2) -> OpCost:
    """The matmuls of one forward pass over ``tokens`` rows: L blocks' four products, then the LM head."""
    *block, head = gpt_matmuls(cfg, tokens, itemsize)
    flops = cfg.n_layer * sum(op.flops for op in block) + head.flops
    moved = cfg.n_layer * sum(op.bytes for op in block) + head.bytes
    return OpCost(f"forward, {tokens:,} tokens", flops, moved, "gpt_matmuls per block x layers, plus the LM head")


def _pairs(prompt_len: int, new_tokens: int) -> tuple[int, int]:
    """Causal (query, key) pairs per sequence: the prefill's P (P + 1) / 2, and the decode passes' sum of P + k."""
    prefill = prompt_len * (prompt_len + 1) // 2
    decode = sum(prompt_len + k for k in range(1, new_tokens))
    return prefill, decode


def rollout_cost(cfg, sequences: int, prompt_len: int, new_tokens: int, itemsize: int = 2) -> OpCost:
    """Sampling ``new_tokens`` for each of ``sequences`` prompts of ``prompt_len`` tokens with the KV cache."""
    _check(sequences, prompt_len, new_tokens)
    S, P, N, L, C = sequences, prompt_len, new_tokens, cfg.n_layer, cfg.n_embd
    prefill = forward_cost(cfg, S * P, itemsize)
    step = forward_cost(cfg, S, itemsize)
    pre_pairs, decode_pairs = _pairs(P, N)
    kv_values = 2 * L * C * S * (P + decode_pairs)  # the prompt's K and V written; each decode pass reads and writes
    flops = prefill.flops + (N - 1) * step.flops + 4 * L * C * S * (pre_pairs + decode_pairs)
    moved = prefill.bytes + (N - 1) * step.bytes + kv_values * itemsize
    rule = "one prefill pass, N - 1 decode passes each reading every weight once, and the KV cache"
    return OpCost(f"rollout, {S} x {N} tokens", flops, moved, rule)


def learner_cost(
    cfg, sequences: int, prompt_len: int, new_tokens: int, itemsize: int = 2, reference: bool = True
) -> OpCost:
    """One learner step: the policy's forward and backward over the rollout, the reference's forward, AdamW."""
    _check(sequences, prompt_len, new_tokens)
    S, T, L, C = sequences, prompt_len + new_tokens - 1, cfg.n_layer, cfg.n_embd
    passes = 3 + (1 if reference else 0)  # forward, backward (two forwards' worth), the reference's forward
    fwd = forward_cost(cfg, S * T, itemsize)
    pairs = T * (T + 1) // 2
    adam = adamw_step(int(shape_of(cfg).params))
    flops = passes * (fwd.flops + 4 * L * C * S * pairs) + adam.flops
    moved = passes * (fwd.bytes + 4 * L * C * S * T * itemsize) + adam.bytes
    rule = "policy forward + backward (3 forwards), the reference's forward, AdamW in fp32"
    return OpCost(f"learner, {S} x {T} tokens", flops, moved, rule)


def grpo_step_cost(
    cfg,
    prompts: int,
    group_size: int,
    prompt_len: int,
    new_tokens: int,
    itemsize: int = 2,
    reference: bool = True,
) -> StepCost:
    """The rollout and the learner of one GRPO step on ``prompts`` x ``group_size`` sequences (``cfg``: a GPTConfig).

    ``itemsize``: bytes per weight and activation (2 for bf16, 4 for fp32);
    ``reference``: beta > 0, so the frozen reference scores the batch too.
    """
    S = prompts * group_size
    roll = rollout_cost(cfg, S, prompt_len, new_tokens, itemsize)
    learn = learner_cost(cfg, S, prompt_len, new_tokens, itemsize, reference)
    return StepCost(roll, learn, S, prompt_len, new_tokens)


def _check(sequences: int, prompt_len: int, new_tokens: int) -> None:
    for name, value in (("sequences", sequences), ("prompt_len", prompt_len), ("new_tokens", new_tokens)):
        if not (isinstance(value, int) and value >= 1):
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")

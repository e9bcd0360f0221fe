"""Chapter 13's step cost: a GRPO step's rollout and learner FLOPs and bytes, against a count by hand."""

import pytest

from gputrain.device import GPU_SPECS
from gputrain.model import GPTConfig, gpt_num_params
from gputrain.posttrain import forward_cost, grpo_step_cost, learner_cost, rollout_cost


def cfg(L=2, C=8, V=11, bias=False, block=64):
    return GPTConfig(vocab_size=V, block_size=block, n_layer=L, n_head=2, n_embd=C, bias=bias)


def hand_forward(c, m, b):
    """One forward over m rows: per block QKV (C x 3C), output (C x C), up (C x 4C), down (4C x C); the head (C x V)."""
    L, C, V = c.n_layer, c.n_embd, c.vocab_size
    mats = [(C, 3 * C), (C, C), (C, 4 * C), (4 * C, C)] * L + [(C, V)]
    flops = sum(2 * m * k * n for k, n in mats)
    moved = sum(b * (m * k + k * n + m * n) for k, n in mats)
    return flops, moved


def hand_rollout(c, S, P, N, b):
    """Step by step: the prefill pass, then each decode pass reading every weight and the cache so far."""
    L, C = c.n_layer, c.n_embd
    flops, moved = hand_forward(c, S * P, b)
    flops += S * sum(4 * L * C * t for t in range(1, P + 1))  # each prompt token attends to those up to it
    moved += S * P * 2 * L * C * b  # the prompt's keys and values written to the cache
    for k in range(1, N):  # the N-th token is sampled from the last pass's logits, never fed back
        f, m = hand_forward(c, S, b)
        context = P + k  # the cached tokens and the new one
        flops += f + S * 4 * L * C * context
        moved += m + S * 2 * L * C * b * ((context - 1) + 1)  # read the cache, write the new key and value
    return flops, moved


def test_one_forward_pass_is_counted_by_hand():
    c = cfg()
    got = forward_cost(c, 5, itemsize=2)
    assert (got.flops, got.bytes) == hand_forward(c, 5, 2)
    # the smallest case written out: L=1, C=2, V=3, one token, one byte per value:
    # flops 24 m C^2 + 2 m C V = 96 + 12; bytes 16 m C + 12 C^2 + m C + C V + m V = 32 + 48 + 2 + 6 + 3
    tiny = forward_cost(cfg(L=1, C=2, V=3), 1, itemsize=1)
    assert (tiny.flops, tiny.bytes) == (108, 91)


@pytest.mark.parametrize("S, P, N, b", [(1, 1, 2, 1), (3, 4, 5, 2), (8, 7, 1, 4)])
def test_the_rollout_is_counted_by_hand(S, P, N, b):
    c = cfg()
    got = rollout_cost(c, S, P, N, itemsize=b)
    assert (got.flops, got.bytes) == hand_rollout(c, S, P, N, b)
    small = rollout_cost(cfg(L=1, C=2, V=3), 1, 1, 2, itemsize=1)
    assert (small.flops, small.bytes) == (2 * 108 + 4 * 2 * (1 + 2), 2 * 91 + 2 * 2 * (1 + 2))  # 240 and 194


def test_the_learner_is_counted_by_hand():
    c = cfg(bias=False)
    S, P, N, b = 4, 5, 6, 2
    T = P + N - 1
    f, m = hand_forward(c, S * T, b)
    attn_flops = 4 * c.n_layer * c.n_embd * S * T * (T + 1) // 2
    attn_bytes = 4 * c.n_layer * S * T * c.n_embd * b  # q, k, v read and the output written
    params = gpt_num_params(c)
    for reference, passes in ((True, 4), (False, 3)):
        got = learner_cost(c, S, P, N, itemsize=b, reference=reference)
        assert got.flops == passes * (f + attn_flops) + 14 * params  # AdamW: 14 FLOPs, 28 bytes per parameter
        assert got.bytes == passes * (m + attn_bytes) + 28 * params


def test_a_rollout_is_memory_bound_and_the_learner_compute_bound_on_an_h100():
    gpt2 = GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)
    step = grpo_step_cost(gpt2, prompts=8, group_size=8, prompt_len=64, new_tokens=256, itemsize=2)
    ridge = GPU_SPECS["H100"].ridge("bf16")
    assert step.rollout.intensity < ridge / 4 < ridge < step.learner.intensity
    assert step.sequences == 64 and step.decoded_tokens == 64 * 256
    # four times the sequences share each weight read, but each reads its own keys and values (about one FLOP
    # per byte): the intensity grows, by less than four
    wide = grpo_step_cost(gpt2, prompts=32, group_size=8, prompt_len=64, new_tokens=256, itemsize=2)
    assert step.rollout.intensity < wide.rollout.intensity < 4 * step.rollout.intensity


def test_bad_sizes_are_refused_with_one_line():
    with pytest.raises(ValueError, match="new_tokens must be an integer >= 1, got 0"):
        grpo_step_cost(cfg(), 2, 2, 3, 0)
    with pytest.raises(ValueError, match="sequences must be an integer >= 1"):
        rollout_cost(cfg(), 0, 3, 3)

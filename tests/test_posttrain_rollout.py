"""Chapter 13's rollouts: G samples per prompt with the KV cache, their log-probs against a teacher-forced pass."""

import random

import pytest
import torch

from gputrain.model import GPT, GPTConfig
from gputrain.posttrain import (
    PAD,
    generate_replies,
    grpo_loss,
    policy_logprobs,
    rollout,
    token_logprobs,
)

U32 = 2.0**-24  # float32's unit roundoff


def tiny_gpt(block_size=24, seed=0, dtype=torch.float32) -> GPT:
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab_size=260, block_size=block_size, n_layer=2, n_head=2, n_embd=32, dropout=0.0)
    return GPT(cfg).to(dtype).eval()


def random_prompts(n, seed=0, lo=2, hi=9):
    rng = random.Random(seed)
    return [[rng.randrange(256) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


def frequent_token(model, prompts):
    """A token the model samples often mid-reply, so that many replies stop at it."""
    counts = {}
    for rs in generate_replies(model, prompts, stop=-1, samples=4, temperature=1.0, max_new_tokens=8):
        for r in rs:
            for t in set(r[1:]):
                counts[t] = counts.get(t, 0) + 1
    return max(counts, key=counts.get)


def fp32_tolerance(model: GPT, ro) -> float:
    """How far two float32 computations of the same log-probs may differ, derived from the model's sums.

    A float32 sum of K products is within K u sum|terms| of the exact sum (Higham's gamma_K, to first order).
    The longest chain of sums to a logit runs through L blocks, each with sums of at most 4C terms (the MLP's
    down projection), then the head's C; an error made early reaches the logit through the head, so we scale
    the whole chain by the head's sum of |h_i w_i|, the largest over every scored position.  Log-softmax moves
    by at most twice its inputs' largest change (the logit itself and the log-sum-exp), and the two paths (KV
    cache and teacher forcing) each carry such an error: 2 x 2 x K u x scale.
    """
    C, L = model.cfg.n_embd, model.cfg.n_layer
    K = L * 4 * C + C
    with torch.no_grad():
        scale = 0.0
        for P in {len(p) for p in ro.prompts}:
            rows = [r for r, p in enumerate(ro.prompts) if len(p) == P]
            width = min(ro.completions.size(1), model.cfg.block_size - P + 1)  # as policy_logprobs scores them
            ids = torch.cat([torch.tensor([ro.prompts[r] for r in rows]), ro.completions[rows, : width - 1]], 1)
            h = model.hidden(ids).abs()  # (b, P + T - 1, C)
            scale = max(scale, float((h @ model.head.weight.abs().T).max()))
    return 4 * K * U32 * scale


def test_log_probs_at_temperature_one_equal_a_teacher_forced_pass():
    model, prompts = tiny_gpt(), random_prompts(6)
    stop = frequent_token(model, prompts)
    ro = rollout(model, prompts, group_size=4, stop=stop, max_new_tokens=8, seed=3, batch_size=5)
    assert ro.stopped.any() and not ro.stopped.all()  # some stop early, some run to the end
    tf = policy_logprobs(model, ro).detach()
    on = ro.mask.bool()
    diff = float((tf - ro.logps)[on].abs().max())
    tol = fp32_tolerance(model, ro)
    assert diff <= tol, (diff, tol)
    assert tol < 1e-2  # the bound is tight enough to catch a token scored at the wrong position
    assert (ro.logps[on] < 0).all() and (ro.logps[~on] == 0).all() and (tf[~on] == 0).all()
    # in float64 the two orders of the same sums agree to float64 rounding: the same tokens, positions, distribution
    m64 = tiny_gpt(dtype=torch.float64)
    r64 = rollout(m64, prompts, group_size=4, stop=stop, max_new_tokens=8, seed=3)
    assert r64.logps.dtype == torch.float64
    assert float((policy_logprobs(m64, r64).detach() - r64.logps).abs().max()) < 1e-12


def test_a_wrong_position_or_temperature_is_caught():
    """The check above can fail: scoring each token one position late, or at another temperature, is far off."""
    model, prompts = tiny_gpt(), random_prompts(4)
    ro = rollout(model, prompts, group_size=2, stop=-1, max_new_tokens=6, seed=1)
    tol = fp32_tolerance(model, ro)
    shifted = ro.logps[:, 1:] - policy_logprobs(model, ro).detach()[:, :-1]
    assert float(shifted.abs().max()) > 100 * tol
    assert float((policy_logprobs(model, ro, temperature=0.5).detach() - ro.logps).abs().max()) > 100 * tol


def test_log_probs_follow_the_temperature_and_the_top_k_cut():
    model, prompts = tiny_gpt(), random_prompts(4, seed=2)
    warm = rollout(model, prompts, group_size=3, stop=-1, temperature=0.7, max_new_tokens=6, seed=5)
    tol = fp32_tolerance(model, warm)
    assert float((policy_logprobs(model, warm).detach() - warm.logps).abs().max()) <= tol  # the rollout's temperature
    cut = rollout(model, prompts, group_size=3, stop=-1, top_k=5, max_new_tokens=6, seed=5)
    full = policy_logprobs(model, cut).detach()
    assert (cut.logps >= full - tol).all()  # the cut renormalises over 5 tokens: each kept one is likelier
    assert float((cut.logps - full).max()) > 100 * tol


def test_the_replies_are_generate_replies_own_and_grouped_prompt_major():
    model, prompts = tiny_gpt(), random_prompts(5, seed=4)
    stop = frequent_token(model, prompts)
    G, kw = 3, dict(stop=stop, temperature=1.0, seed=9, max_new_tokens=7)
    ro = rollout(model, prompts, group_size=G, batch_size=4, **kw)
    replies = generate_replies(model, prompts, samples=G, **kw)
    assert ro.replies() == [r for rs in replies for r in rs]
    assert ro.prompts == [p for p in prompts for _ in range(G)]
    for row, (ids, n, end) in enumerate(zip(ro.completions.tolist(), ro.lengths.tolist(), ro.stopped.tolist())):
        assert (ids[n - 1] == stop) == end and stop not in ids[: n - 1]  # the stop token ends a reply, kept
        assert ids[n:] == [PAD] * (len(ids) - n) and ro.mask[row, :n].all()
    assert ro.tokens == int(ro.lengths.sum()) and ro.seconds > 0 and ro.group_size == G


def test_a_reply_that_fills_the_context_is_scored_and_the_model_is_left_as_it_was():
    model = tiny_gpt(block_size=12).train()
    ro = rollout(model, [[5] * 10, [6] * 3], group_size=2, stop=-1, max_new_tokens=20, seed=0)
    assert ro.lengths.tolist() == [3, 3, 10, 10]  # 12 - 10 + 1: the last token is chosen, never fed back
    assert model.training
    model.eval()
    assert float((policy_logprobs(model, ro).detach() - ro.logps).abs().max()) <= fp32_tolerance(model, ro)


def test_the_grpo_ratio_is_one_on_policy_and_the_gradient_flows():
    """With the rollout's log-probs as pi_old, the first learner step is on-policy: the same loss and gradient."""
    model, prompts = tiny_gpt(), random_prompts(4, seed=6)
    ro = rollout(model, prompts, group_size=4, stop=-1, max_new_tokens=5, seed=2)
    adv = torch.randn(len(ro.prompts), generator=torch.Generator().manual_seed(0))
    grads = []
    for old in (ro.logps, None):
        model.zero_grad()
        loss = grpo_loss(policy_logprobs(model, ro), ro.mask, adv, old_logps=old, loss_type="grpo")
        loss.backward()
        grads.append((float(loss.detach()), model.wte.weight.grad.clone()))
    assert abs(grads[0][0] - grads[1][0]) < 1e-5
    assert torch.allclose(grads[0][1], grads[1][1], atol=1e-5) and grads[0][1].abs().sum() > 0


def test_token_logprobs_is_what_the_learner_uses():
    model = tiny_gpt()
    ro = rollout(model, [[1, 2, 3]], group_size=2, stop=-1, max_new_tokens=4, seed=0)
    logits, _ = model(torch.cat([torch.tensor([[1, 2, 3]] * 2), ro.completions[:, :-1]], 1))
    direct = token_logprobs(logits[:, 2:], ro.completions)
    assert torch.allclose(direct, policy_logprobs(model, ro))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(group_size=0), "group_size must be an integer >= 1"),
        (dict(group_size=2.5), "group_size must be an integer >= 1"),
        (dict(temperature=0.0), "temperature must be > 0"),
        (dict(max_new_tokens=0), "max_new_tokens must be >= 1"),
        (dict(top_k=-1), "top_k must be >= 1"),
    ],
)
def test_bad_rollouts_are_refused_with_one_line(kwargs, message):
    settings = dict(group_size=2, stop=-1) | kwargs
    with pytest.raises(ValueError, match=message) as err:
        rollout(tiny_gpt(), [[1, 2]], **settings)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="prompt 0 is 25 tokens"):
        rollout(tiny_gpt(), [[1] * 25], group_size=2, stop=-1)


@pytest.mark.parametrize("temperature, top_k", [(1.0, None), (0.7, 5), (1.3, 1)])
def test_the_batched_draw_is_torch_multinomial_row_by_row(temperature, top_k):
    """choose draws argmax(p / q), q ~ Exp(1) from each row's generator: multinomial's tokens and generator states."""
    from gputrain.posttrain.generation import choose, sampling_logits

    logits = torch.randn(300, 260, generator=torch.Generator().manual_seed(0)) * 3
    ours = [torch.Generator().manual_seed(1000 + r) for r in range(len(logits))]
    theirs = [torch.Generator().manual_seed(1000 + r) for r in range(len(logits))]
    for _ in range(3):  # the generators go on alike
        probs = torch.softmax(sampling_logits(logits, temperature, top_k), dim=-1)
        drawn = torch.cat([torch.multinomial(probs[r : r + 1], 1, generator=g)[0] for r, g in enumerate(theirs)])
        assert torch.equal(choose(logits, temperature, top_k, ours), drawn)
    assert all(torch.equal(a.get_state(), b.get_state()) for a, b in zip(ours, theirs))
    with pytest.raises(ValueError, match="NaN"):
        choose(torch.full((2, 260), float("nan")), 1.0, None, ours[:2])


def test_noise_drawn_ahead_in_blocks_of_any_size_gives_the_same_replies(monkeypatch):
    """On a CPU each row's Exp(1) noise is drawn several steps at once; a block of one step is choose's own draw."""
    import gputrain.posttrain.generation as generation

    model, prompts = tiny_gpt(), random_prompts(6, seed=2)
    kw = dict(group_size=3, temperature=0.8, top_k=20, seed=3, max_new_tokens=12, batch_size=4)
    monkeypatch.setattr(generation, "NOISE_BLOCK", 1)  # one step at a time
    kw["stop"] = int(rollout(model, prompts, stop=-1, **kw).completions.flatten().mode().values)  # a common token
    ref = rollout(model, prompts, **kw)
    assert ref.stopped.any() and not ref.stopped.all()  # rows leave the batch mid-block
    for block in (3 * 4 * 260, 5 * 4 * 260, 2**20):
        monkeypatch.setattr(generation, "NOISE_BLOCK", block)
        ro = rollout(model, prompts, **kw)
        assert torch.equal(ro.completions, ref.completions) and torch.equal(ro.logps, ref.logps)

"""Issue 33: what an RL step records beside its loss; num_iterations: one rollout, clipped steps, exact resume."""

import math

import pytest
import torch
from helpers import TINY_RL, TINY_RL_RUN, tiny_chat_checkpoint

from gputrain.model import GPT, GPTConfig
from gputrain.posttrain import HISTORY_KEYS, GRPOSettings, policy_logprobs, reinforce, rollout

torch.set_num_threads(1)
SMALL, FAST = TINY_RL, TINY_RL_RUN


def has_digit(prompts, completions, **columns):
    """A 0/1 reward that a near-uniform tiny model earns about a quarter of the time (the task's, almost never)."""
    return [float(any(ch.isdigit() for ch in c)) for c in completions]


@pytest.fixture(scope="module")
def sft(tmp_path_factory):
    return tiny_chat_checkpoint(tmp_path_factory.mktemp("rlsteps"))


def test_every_step_records_what_the_loss_hides(sft):
    result = reinforce(sft, settings=GRPOSettings(**SMALL, beta=0.04), reward_fn=has_digit, max_steps=3, **FAST)
    for h, loss in zip(result.model.history, result.losses):
        assert set(h) == set(HISTORY_KEYS)
        assert h["loss"] == pytest.approx(loss, abs=1e-6) and 0 <= h["reward"] <= 1 and h["reward_std"] >= 0
        assert 0 < h["length"] <= SMALL["max_new_tokens"] and h["tokens"] == round(h["length"] * 16)
        right, wrong = h["length_right"], h["length_wrong"]
        share = h["reward"]  # a 0/1 task: the share of right replies
        assert (right is None) == (share == 0) and (wrong is None) == (share == 1)
        assert h["reward_std"] == pytest.approx(math.sqrt(share * (1 - share) * 16 / 15))
        parts = [(right, share), (wrong, 1 - share)]
        assert sum(n * w for n, w in parts if n is not None) == pytest.approx(h["length"])
        assert 0 < h["entropy"] < math.log(result.model.policy.cfg.vocab_size)
        assert h["clip_fraction"] == 0.0  # one step per rollout: the ratio is exactly 1
        assert h["kl"] >= 0 and h["value_loss"] is None and h["fresh"] is True
        assert h["rollout_seconds"] > 0 and h["learn_seconds"] > 0 and h["score_seconds"] >= 0
    assert result.model.history[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # the policy starts as its reference
    assert any(0 < h["reward"] < 1 for h in result.model.history)  # both lengths were measured


def test_without_a_reference_kl_is_none(sft):
    result = reinforce(sft, settings=GRPOSettings(**SMALL), max_steps=1, **FAST)
    assert result.model.reference is None and result.model.history[0]["kl"] is None


def test_the_entropy_is_the_whole_distributions_from_the_learners_own_logits():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=40, block_size=32, n_layer=1, n_head=2, n_embd=16))
    ro = rollout(model, [[1, 2, 3], [4, 5]], group_size=3, stop=0, max_new_tokens=6, temperature=0.7, seed=3)
    logps, entropy = policy_logprobs(model, ro, entropy=True)
    assert torch.equal(logps, policy_logprobs(model, ro))  # the same log-probs as without entropy
    for r in range(len(ro.prompts)):  # by hand: one row at a time, torch's Categorical
        n = int(ro.lengths[r])
        ids = torch.tensor([ro.prompts[r] + ro.completions[r, : n - 1].tolist()])
        logits = model(ids)[0][0, len(ro.prompts[r]) - 1 :] / 0.7
        expected = torch.distributions.Categorical(logits=logits).entropy()
        assert torch.allclose(entropy[r, :n], expected, atol=1e-5) and not entropy[r, n:].any()
    assert not entropy.requires_grad and logps.requires_grad


def test_num_iterations_reuses_one_rollout_and_the_clip_acts(sft):
    settings = GRPOSettings(**SMALL, num_iterations=3, epsilon=0.05)
    result = reinforce(sft, settings=settings, reward_fn=has_digit, max_steps=6, lr=3e-3, **FAST)
    h = result.model.history
    assert [s["fresh"] for s in h] == [True, False, False, True, False, False]
    assert [s["rollout_seconds"] == 0 for s in h] == [False, True, True, False, True, True]
    for cycle in (h[0:3], h[3:6]):  # one rollout: the same rewards and lengths for its three steps
        assert len({(s["reward"], s["length"], s["zero_groups"]) for s in cycle}) == 1
    assert h[0]["clip_fraction"] < 0.01  # pi_old is the sampler's: the ratio starts at 1, up to rounding
    assert max(s["clip_fraction"] for s in h[1:3] + h[4:6]) > 0  # the policy moved: the clip stops some tokens
    assert len(set(result.losses[0:3])) == 3  # the ratio moves, and the loss with it


def test_a_checkpoint_written_mid_cycle_resumes_to_the_same_losses(sft, tmp_path):
    settings = GRPOSettings(**SMALL, num_iterations=3, beta=0.04, epsilon_high=0.28)
    straight = reinforce(sft, settings=settings, max_steps=5, lr=3e-3, **FAST)
    reinforce(sft, settings=settings, max_steps=2, schedule_steps=5, lr=3e-3, checkpoint_dir=str(tmp_path / "c"),
              **FAST)  # fmt: skip
    resumed = reinforce(resume_from=str(tmp_path / "c"), max_steps=5)
    assert resumed.resumed_step == 2 and resumed.losses == straight.losses
    assert [s["fresh"] for s in resumed.model.history] == [False, True, False]  # step 3 reused the stored rollout
    assert [s["loss"] for s in resumed.model.history] == [s["loss"] for s in straight.model.history[2:]]


def test_num_iterations_needs_a_fixed_micro_batch(sft):
    with pytest.raises(ValueError, match="grad_accum_steps 1"):
        reinforce(sft, settings=GRPOSettings(**SMALL, num_iterations=2), max_steps=1, grad_accum_steps=2, **FAST)

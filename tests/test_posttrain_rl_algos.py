"""Issue 33, items 1 and 6: GRPO, RLOO and PPO each run on the loop, learn an easy reward, and equal their formulas."""

import pytest
import torch
from helpers import TINY_RL, TINY_RL_RUN, tiny_chat_checkpoint

from gputrain.model import GPT, GPTConfig
from gputrain.posttrain import (
    ALGOS,
    GRPOSettings,
    ValueModel,
    algo_advantages,
    algo_loss,
    reinforce,
    rollout,
)

torch.set_num_threads(1)
SMALL, FAST = TINY_RL, TINY_RL_RUN


def digit_share(prompts, completions, **columns):
    """An easy reward: the share of a reply's 8 tokens that are digits (a near-uniform model starts near 0.15)."""
    return [sum(ch.isdigit() for ch in c) / 8 for c in completions]


@pytest.fixture(scope="module")
def sft(tmp_path_factory):
    return tiny_chat_checkpoint(tmp_path_factory.mktemp("rlalgos"))


@pytest.mark.parametrize("algo", list(ALGOS))
def test_each_algorithm_learns_an_easy_reward(sft, algo):
    settings = GRPOSettings(**SMALL, algo=algo, kl_coef=0.01)
    result = reinforce(sft, settings=settings, reward_fn=digit_share, max_steps=24, lr=2e-2, **FAST)
    h = result.model.history
    first, last = (sum(s["reward"] for s in part) / 6 for part in (h[:6], h[-6:]))
    assert last > first + 0.3, (first, last)
    assert all((s["value_loss"] is not None) == (algo == "ppo") for s in h)
    assert all((s["kl"] is not None) == (algo == "ppo") for s in h)  # beta 0: only PPO keeps a reference


@pytest.fixture(scope="module")
def frozen():
    """One frozen batch: 2 prompts x 3 replies of unequal lengths, rewards, and policy, old, reference log-probs."""
    gen = torch.Generator().manual_seed(5)
    lengths = torch.tensor([5, 3, 6, 1, 4, 6])
    mask = (torch.arange(6)[None, :] < lengths[:, None]).double()
    base = torch.log(torch.full((6, 6), 1 / 40, dtype=torch.float64))
    noise = lambda s: s * torch.randn(6, 6, generator=gen, dtype=torch.float64)  # noqa: E731
    logps = ((base + noise(0.3)) * mask).requires_grad_()
    old, ref = (base + noise(0.3)) * mask, (base + noise(0.3)) * mask
    rewards = torch.tensor([1.0, 0.0, 0.5, 1.0, 1.0, 0.0], dtype=torch.float64)
    values = (noise(0.5) * mask).requires_grad_()
    old_values = (values.detach() + noise(0.4)) * mask
    return dict(logps=logps, old=old, ref=ref, mask=mask, rewards=rewards, values=values, old_values=old_values)


def _grad(loss, *tensors):
    return torch.autograd.grad(loss, tensors)


@pytest.mark.parametrize("beta, normalize", [(0.0, False), (0.04, True)])
def test_rloo_equals_trls_formula_written_here(frozen, beta, normalize):
    f, G = frozen, 3
    s = GRPOSettings(algo="rloo", group_size=G, beta=beta, normalize_advantages=normalize, epsilon=0.2,
                     epsilon_high=0.28)  # fmt: skip
    adv, returns = algo_advantages(s, f["rewards"], f["mask"], f["old"], f["ref"])
    out = algo_loss(s, f["logps"], f["old"], f["mask"], adv)
    # by hand, one reply at a time: the reward less beta x its summed k1 KL, less the mean of its group's others
    r = [float(f["rewards"][i] - beta * ((f["old"][i] - f["ref"][i]) * f["mask"][i]).sum()) for i in range(6)]
    expected = [r[i] - sum(r[j] for j in range(i // G * G, i // G * G + G) if j != i) / (G - 1) for i in range(6)]
    expected = torch.tensor(expected, dtype=torch.float64)
    if normalize:
        expected = (expected - expected.mean()) / (expected.std() + 1e-4)
    assert returns is None and torch.allclose(adv, expected, atol=1e-12)
    terms = []
    for i in range(6):  # one ratio per reply: of its whole log-probability
        ratio = torch.exp(((f["logps"][i] - f["old"][i]) * f["mask"][i]).sum())
        terms.append(-torch.min(ratio * expected[i], ratio.clamp(0.8, 1.28) * expected[i]))
    by_hand = torch.stack(terms).mean()
    assert torch.allclose(out.loss, by_hand, atol=1e-12)
    assert torch.allclose(_grad(out.loss, f["logps"])[0], _grad(by_hand, f["logps"])[0], atol=1e-12)
    assert out.value_loss is None and 0 <= out.clip_fraction <= 1


def _gae_by_hand(rewards, values, n, lam):
    """GAE with gamma 1 by its definition: A_t = sum_l lam^l delta_{t+l}, V after the reply's last token 0."""
    delta = [rewards[t] + (values[t + 1] if t + 1 < n else 0.0) - values[t] for t in range(n)]
    return [sum(lam**k * delta[t + k] for k in range(n - t)) for t in range(n)]


def test_ppo_equals_instructgpts_rewards_gae_and_the_clipped_losses_written_here(frozen):
    f = frozen
    s = GRPOSettings(algo="ppo", group_size=3, kl_coef=0.05, vf_coef=0.1, cliprange_value=0.2, epsilon=0.2, lam=0.95)
    adv, returns = algo_advantages(s, f["rewards"], f["mask"], f["old"], f["ref"], f["old_values"])
    out = algo_loss(s, f["logps"], f["old"], f["mask"], adv, f["ref"], f["values"], f["old_values"], returns)
    raw, want_returns = torch.zeros(6, 6, dtype=torch.float64), torch.zeros(6, 6, dtype=torch.float64)
    for i in range(6):
        n = int(f["mask"][i].sum())
        per_token = [float(-0.05 * (f["old"][i, t] - f["ref"][i, t])) for t in range(n)]
        per_token[-1] += float(f["rewards"][i])  # the reward lands on the reply's last token
        a = _gae_by_hand(per_token, f["old_values"][i].tolist(), n, 0.95)
        raw[i, :n] = torch.tensor(a, dtype=torch.float64)
        want_returns[i, :n] = raw[i, :n] + f["old_values"][i, :n]
    counted = raw[f["mask"].bool()]
    whitened = (raw - counted.mean()) / torch.sqrt(counted.var(unbiased=False) + 1e-8) * f["mask"]
    assert torch.allclose(adv, whitened, atol=1e-10) and torch.allclose(returns, want_returns, atol=1e-12)
    ratio = torch.exp(f["logps"] - f["old"])
    policy = -torch.min(ratio * whitened, ratio.clamp(0.8, 1.2) * whitened)
    v, v_old = f["values"], f["old_values"]
    v_clip = v_old + (v - v_old).clamp(-0.2, 0.2)
    value = 0.5 * torch.max((v - want_returns) ** 2, (v_clip - want_returns) ** 2)
    tokens = f["mask"].sum()
    by_hand = (policy * f["mask"]).sum() / tokens + 0.1 * (value * f["mask"]).sum() / tokens
    assert torch.allclose(out.loss, by_hand, atol=1e-10)
    assert out.value_loss == pytest.approx(float((value * f["mask"]).sum().detach() / tokens), abs=1e-10)
    for got, want in zip(_grad(out.loss, f["logps"], f["values"]), _grad(by_hand, f["logps"], f["values"])):
        assert torch.allclose(got, want, atol=1e-10)


def test_the_value_model_is_the_policys_trunk_with_a_zero_scalar_head():
    torch.manual_seed(0)
    policy = GPT(GPTConfig(vocab_size=40, block_size=32, n_layer=1, n_head=2, n_embd=16))
    value = ValueModel(policy)
    ro = rollout(policy, [[1, 2, 3], [4, 5]], group_size=2, stop=0, max_new_tokens=5, seed=1)
    assert not value(ro).any()  # zero at the start: GAE's first advantages are the rewards
    torch.nn.init.normal_(value.score.weight)
    got = value(ro)
    for r in range(4):  # by hand: the policy's own hidden states, read where the reply's logits are
        n, P = int(ro.lengths[r]), len(ro.prompts[r])
        ids = torch.tensor([ro.prompts[r] + ro.completions[r, : n - 1].tolist()])
        want = value.score(policy.hidden(ids)[0, P - 1 :]).squeeze(-1)
        assert torch.allclose(got[r, :n], want, atol=1e-6) and not got[r, n:].any()
    assert value.trunk.wte.weight.data_ptr() != policy.wte.weight.data_ptr()  # a copy: it trains on its own


@pytest.mark.parametrize("algo, extra", [("ppo", {}), ("rloo", {"beta": 0.04})])
def test_a_checkpoint_mid_cycle_resumes_each_algorithm_exactly(sft, tmp_path, algo, extra):
    settings = GRPOSettings(**SMALL, algo=algo, num_iterations=2, **extra)
    straight = reinforce(sft, settings=settings, reward_fn=digit_share, max_steps=4, lr=1e-2, **FAST)
    reinforce(sft, settings=settings, reward_fn=digit_share, max_steps=1, schedule_steps=4, lr=1e-2,
              checkpoint_dir=str(tmp_path / "c"), **FAST)  # fmt: skip
    resumed = reinforce(resume_from=str(tmp_path / "c"), reward_fn=digit_share, max_steps=4)
    assert resumed.losses == straight.losses and resumed.model.history[0]["fresh"] is False


def test_ppo_alone_samples_one_reply_per_problem(sft):
    settings = GRPOSettings(**{**SMALL, "group_size": 1}, algo="ppo")
    result = reinforce(sft, settings=settings, reward_fn=digit_share, max_steps=2, **FAST)
    assert [h["zero_groups"] for h in result.model.history] == [None, None]
    assert all(h["tokens"] <= 4 * SMALL["max_new_tokens"] and h["value_loss"] > 0 for h in result.model.history)
    for algo in ("grpo", "rloo"):
        with pytest.raises(ValueError, match="group_size must be >= 2"):
            GRPOSettings(group_size=1, algo=algo).check()
    with pytest.raises(ValueError, match="ppo's KL penalty is kl_coef"):  # beta would be silently unused
        GRPOSettings(algo="ppo", beta=0.04).check()

"""Mixture of experts: router, capacity, balancing, GPT with MoE blocks, parameter counts (chapter 9)."""

import math

import pytest
import torch
import torch.nn.functional as F
from package_layout import check_exports, check_layout

from gputrain import moe
from gputrain.model import GPT, GPTConfig, gpt_num_params
from gputrain.moe import MoE, MoEConfig


def layer(dtype=torch.float64, seed=0, **kw) -> MoE:
    torch.manual_seed(seed)
    args = dict(dim=12, n_experts=8, top_k=2, expert_hidden=10, n_shared=1)
    args.update(kw)
    m = MoE(MoEConfig(**args)).to(dtype)
    with torch.no_grad():
        m.router.weight.normal_(0, 1.0)  # spread scores so top-k choices are not ties
    return m


def reference_forward(m: MoE, x: torch.Tensor, keep=None) -> torch.Tensor:
    """Token by token, expert by expert: what the layer means, with no batching tricks."""
    r = m.router(x)
    keep = r.keep if keep is None else keep
    rows = []
    for t in range(len(x)):
        y = sum(e(x[t : t + 1]) for e in m.shared) if len(m.shared) else torch.zeros_like(x[t : t + 1])
        for j in range(m.cfg.top_k):
            if keep[t, j]:
                y = y + r.gates[t, j] * m.experts[int(r.experts[t, j])](x[t : t + 1])
        rows.append(y)
    return torch.cat(rows)


def test_softmax_router_is_topk_of_softmax():
    m = layer(router="softmax")
    x = torch.randn(30, 12, dtype=torch.float64)
    r = m.router(x)
    probs = F.softmax(x @ m.router.weight.t(), dim=-1)
    ref = torch.topk(probs, 2, dim=-1)
    assert torch.equal(r.experts, ref.indices)
    torch.testing.assert_close(r.gates, ref.values)  # Switch/GShard: the probabilities themselves
    torch.testing.assert_close(r.probs, probs)


def test_sigmoid_router_normalizes_the_selected_k():
    m = layer(router="sigmoid", routed_scaling=2.5, top_k=3)
    x = torch.randn(30, 12, dtype=torch.float64)
    r = m.router(x)
    s = torch.sigmoid(x @ m.router.weight.t())
    top = torch.topk(s, 3, dim=-1)
    assert torch.equal(r.experts, top.indices)
    torch.testing.assert_close(r.gates, 2.5 * top.values / top.values.sum(-1, keepdim=True))
    torch.testing.assert_close(r.gates.sum(-1), torch.full((30,), 2.5, dtype=torch.float64))


def test_dropless_layer_equals_token_by_token_reference():
    for router in ("softmax", "sigmoid"):
        m = layer(router=router)
        x = torch.randn(40, 12, dtype=torch.float64)
        torch.testing.assert_close(m(x), reference_forward(m, x), rtol=1e-12, atol=1e-12)
        assert m.last_dropped == 0 and int(m.last_counts.sum()) == 40 * 2


def test_capacity_drops_and_counts_past_the_cap():
    m = layer(capacity_factor=0.5)
    x = torch.randn(64, 12, dtype=torch.float64)
    out = m(x)
    cap = math.ceil(0.5 * 64 * 2 / 8)
    counts = m.last_counts
    assert m.cfg.capacity(64) == cap == 8
    assert m.last_dropped == int((counts - cap).clamp(min=0).sum()) > 0
    # the kept assignments are each expert's first `cap` in token order
    r = m.router(x)
    keep = torch.zeros_like(r.experts, dtype=torch.bool)
    seen = [0] * 8
    for t in range(64):
        for j in range(2):
            e = int(r.experts[t, j])
            keep[t, j] = seen[e] < cap
            seen[e] += 1
    assert torch.equal(moe.apply_capacity(r.experts, 8, cap), keep)
    torch.testing.assert_close(out, reference_forward(m, x, keep), rtol=1e-12, atol=1e-12)


def test_an_expert_with_no_tokens_gets_no_gradient_and_no_error():
    m = layer()
    m.router.e_bias[3] = -100.0  # nobody chooses expert 3
    x = torch.randn(20, 12, dtype=torch.float64, requires_grad=True)
    m(x).square().sum().backward()
    assert int(m.last_counts[3]) == 0
    assert all(p.grad is None for p in m.experts[3].parameters())
    assert all(p.grad is not None for e in (0, 1, 2) for p in m.experts[e].parameters() if int(m.last_counts[e]) > 0)
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_aux_loss_matches_the_switch_formula():
    m = layer(router="softmax", balance="aux", aux_loss_weight=0.1)
    x = torch.randn(50, 12, dtype=torch.float64)
    m(x)
    probs = F.softmax(x @ m.router.weight.t(), dim=-1)
    chosen = torch.topk(probs, 2, dim=-1).indices
    f = [(chosen == i).sum().item() / (50 * 2) for i in range(8)]
    P = probs.mean(0)
    expected = 0.1 * 8 * sum(f[i] * P[i].item() for i in range(8))
    assert abs(m.aux_loss.item() - expected) < 1e-12
    # uniform routing gives exactly alpha
    uniform = moe.balance_loss(torch.full((8, 8), 1 / 8), torch.arange(8)[:, None], 8, 0.1)
    assert abs(uniform.item() - 0.1) < 1e-7


def test_aux_loss_of_an_empty_batch_is_zero_not_nan():
    # 0 tokens: f_i = 0/0 and P_i = mean of nothing; the loss must be 0 and backward must still run
    for router in ("softmax", "sigmoid"):
        m = layer(router=router, balance="aux", aux_loss_weight=0.1)
        x = torch.zeros(0, 12, dtype=torch.float64, requires_grad=True)
        out = m(x)
        assert out.shape == (0, 12) and m.aux_loss.item() == 0.0
        (out.sum() + m.aux_loss).backward()
        assert torch.isfinite(m.router.weight.grad).all() and m.router.weight.grad.abs().sum() == 0
    assert moe.balance_loss(torch.zeros(0, 8), torch.zeros(0, 2, dtype=torch.long), 8, 0.1).item() == 0.0


def test_bias_moves_against_the_load_and_balances_a_skewed_router():
    m = layer(balance="bias", bias_gamma=0.01, dtype=torch.float32)
    with torch.no_grad():
        m.router.weight[0] += 3.0  # expert 0 is everybody's favourite
    x = torch.randn(256, 12)
    m(x)
    load = m.last_counts.float()
    m.update_bias()
    expected = 0.01 * torch.sign(load.mean() - load)
    torch.testing.assert_close(m.router.e_bias, expected)
    assert m.router.e_bias[0] < 0 and float(m.load_since_update.sum()) == 0
    first_share = load.max() / load.sum()
    for _ in range(300):
        m(x)
        m.update_bias()
    share = m.last_counts.float().max() / m.last_counts.sum()
    assert share - 1 / 8 < (first_share - 1 / 8) / 3, (first_share, share)  # excess over uniform cut 3x


def test_bias_does_not_change_gate_values():
    m = layer(router="sigmoid")
    x = torch.randn(10, 12, dtype=torch.float64)
    m.router.e_bias.normal_(0, 3.0)
    r = m.router(x)
    s = torch.sigmoid(x @ m.router.weight.t()).gather(-1, r.experts)
    torch.testing.assert_close(r.gates, s / s.sum(-1, keepdim=True))
    assert torch.equal(
        r.experts,
        (s.new_zeros(10, 8) + torch.sigmoid(x @ m.router.weight.t()) + m.router.e_bias).topk(2, dim=-1).indices,
    )


def test_node_limited_routing_stays_within_m_groups():
    m = layer(n_experts=16, top_k=4, n_groups=4, topk_groups=2)
    x = torch.randn(200, 12, dtype=torch.float64)
    r = m.router(x)
    groups_used = torch.tensor([len(set((row // 4).tolist())) for row in r.experts])
    assert groups_used.max() <= 2
    free = layer(n_experts=16, top_k=4)
    free.router.load_state_dict(m.router.state_dict())
    assert torch.tensor([len(set((row // 4).tolist())) for row in free.router(x).experts]).max() > 2
    all_groups = layer(n_experts=16, top_k=4, n_groups=4, topk_groups=4)
    all_groups.router.load_state_dict(m.router.state_dict())
    assert torch.equal(all_groups.router(x).experts, free.router(x).experts)


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(top_k=9), "top_k=9 is larger than n_experts=8"),
        (dict(capacity_factor=0.0), "capacity_factor must be > 0"),
        (dict(capacity_factor=-1.0), "capacity_factor must be > 0"),
        (dict(router="relu"), "unknown router 'relu'"),
        (dict(balance="magic"), "unknown balance 'magic'"),
        (dict(n_groups=3), "n_groups=3 must be >= 1 and divide n_experts=8"),
        (dict(n_groups=4, topk_groups=1, top_k=3), "do not fit in topk_groups=1"),
    ],
)
def test_bad_configurations_are_one_line_errors(kw, message):
    args = dict(dim=8, n_experts=8, top_k=2)
    args.update(kw)
    with pytest.raises(ValueError, match=message):
        MoEConfig(**args)


def test_gpt_config_validates_its_moe_fields():
    with pytest.raises(ValueError, match="top_k=5 is larger than n_experts=4"):
        GPTConfig(n_experts=4, top_k=5)
    with pytest.raises(ValueError, match="capacity_factor must be > 0"):
        GPTConfig(n_experts=4, capacity_factor=0)
    with pytest.raises(ValueError, match="n_experts >= 0"):
        GPTConfig(n_experts=-1)


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(bias=False),
        dict(n_shared_experts=0, top_k=1),
        dict(moe_first_dense=1, moe_every=2, n_layer=5),
        dict(expert_hidden=24, n_experts=16, top_k=4),
    ],
)
def test_parameter_counts_match_the_formula(kw):
    args = dict(vocab_size=50, block_size=16, n_layer=3, n_head=2, n_embd=32, n_experts=8, top_k=2)
    args.update(kw)
    cfg = GPTConfig(**args)
    total, active = moe.count_moe_params(GPT(cfg))
    assert total == gpt_num_params(cfg) and active == gpt_num_params(cfg, active=True)
    assert active < total
    if not kw:  # dense-sized experts: active FFN width k*h + S*h == 4C, so active ~ a dense GPT
        dense = gpt_num_params(GPTConfig(**{**args, "n_experts": 0}))
        assert abs(active - dense) / dense < 0.02


def test_deepseek_v3_counts_from_its_configuration():
    c = moe.deepseek_v3_params()
    assert abs(c["total"] / 671e9 - 1) < 0.01
    assert abs(c["active"] / 36.6e9 - 1) < 0.01  # DeepSeek's breakdown: 36.6 B, "37 B" in the report
    assert abs(c["active"] / 37e9 - 1) < 0.015
    assert abs(c["with_mtp_stored"] / 685e9 - 1) < 0.01
    assert abs(c["mtp"] / 11.5e9 - 1) < 0.01


def test_gpt_with_moe_trains_and_updates_biases():
    torch.manual_seed(0)
    cfg = GPTConfig(
        vocab_size=32,
        block_size=16,
        n_layer=2,
        n_head=2,
        n_embd=32,
        n_experts=8,
        top_k=2,
        balance="bias",
        bias_gamma=0.01,
    )
    model = GPT(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.randint(0, 32, (8, 17))
    losses = []
    for _ in range(40):
        _, loss = model(data[:, :-1], data[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert moe.update_router_biases(model) == 2
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0], losses
    assert moe.expert_loads(model).shape == (2, 8)
    assert any(m.router.e_bias.abs().sum() > 0 for m in model.modules() if isinstance(m, MoE))


def test_gpt_adds_the_aux_loss():
    torch.manual_seed(0)
    cfg = GPTConfig(
        vocab_size=32, block_size=8, n_layer=2, n_head=2, n_embd=16, n_experts=4, balance="aux", aux_loss_weight=0.5
    )
    model = GPT(cfg)
    idx = torch.randint(0, 32, (2, 8))
    logits, loss = model(idx, idx)
    ce = F.cross_entropy(logits.flatten(0, 1), idx.flatten())
    aux = moe.aux_loss(model)
    assert aux.item() > 0.5 * 2 * 0.9  # two layers, each about alpha
    torch.testing.assert_close(loss, ce + aux)


def test_the_moe_package_stays_in_modules_a_reader_can_hold():
    """moe.py had grown to 400 lines: configuration, experts, router, layer, model-wide balancing and
    parameter counts.  Each is now a module under 300 lines, drawn in the package's docstring; a module
    imports only those drawn above it, and the package re-exports every name."""
    check_layout("gputrain.moe")
    check_exports("gputrain.moe")

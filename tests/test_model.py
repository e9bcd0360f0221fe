"""gputrain.model: the MLP, the perceptron, linear collapse, shape tracing, parameter counts (chapter 2)."""

import math

import pytest
import torch
import torch.nn.functional as F
from package_layout import check_exports, check_layout

from gputrain.model import (
    GPT,
    MLP,
    GPTConfig,
    KVCache,
    Perceptron,
    best_linear_accuracy,
    collapse_linear,
    count_params,
    gpt_num_params,
    trace_shapes,
)

XOR_X = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])


@pytest.mark.parametrize("depth", [1, 2, 3, 5])
@pytest.mark.parametrize("activation", ["relu", "gelu", "tanh", "sigmoid", "identity"])
def test_mlp_depth_and_activation(depth, activation):
    torch.manual_seed(0)
    mlp = MLP(6, 3, hidden=16, depth=depth, activation=activation)
    linears = mlp.linears()
    assert len(linears) == depth
    assert linears[0].in_features == 6 and linears[-1].out_features == 3
    x = torch.randn(4, 6)
    # the same computation written out with the functional API
    act = {"relu": F.relu, "gelu": F.gelu, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "identity": lambda t: t}[
        activation
    ]
    h = x
    for layer in linears[:-1]:
        h = act(F.linear(h, layer.weight, layer.bias))
    expected = F.linear(h, linears[-1].weight, linears[-1].bias)
    torch.testing.assert_close(mlp(x), expected)


def test_mlp_bad_arguments_name_the_fix():
    with pytest.raises(ValueError, match="depth must be >= 1"):
        MLP(2, 2, depth=0)
    with pytest.raises(ValueError, match="use one of: relu"):
        MLP(2, 2, activation="swishy")


def test_gpt_feed_forward_is_the_mlp_with_unchanged_names():
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32)
    model = GPT(cfg)
    names = set(dict(model.named_parameters()))
    for n in range(2):
        for part in ("fc.weight", "fc.bias", "proj.weight", "proj.bias"):
            assert f"blocks.{n}.mlp.{part}" in names
    assert not any(".mlp.hidden" in name for name in names)
    mlp = model.blocks[0].mlp
    assert isinstance(mlp, MLP) and mlp.fc.out_features == 4 * cfg.n_embd
    x = torch.randn(2, 5, cfg.n_embd)
    torch.testing.assert_close(mlp(x), mlp.proj(F.gelu(mlp.fc(x))))
    # GPT-2's scaled init still reaches the MLP's residual projection
    assert mlp.proj.weight.std().item() == pytest.approx(0.02 / math.sqrt(2 * cfg.n_layer), rel=0.1)


@pytest.mark.parametrize("bias", [True, False])
def test_gpt_param_formula_matches_the_model(bias):
    cfg = GPTConfig(vocab_size=100, block_size=24, n_layer=3, n_head=4, n_embd=48, bias=bias)
    assert gpt_num_params(cfg) == count_params(GPT(cfg))


def test_gpt2_small_has_124m_parameters():
    cfg = GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)
    with torch.device("meta"):  # shapes only: no memory, no time
        model = GPT(cfg)
    assert count_params(model) == gpt_num_params(cfg) == 124_439_808


@pytest.mark.parametrize("bias", [True, False])
def test_identity_mlp_collapses_to_one_matrix(bias):
    torch.manual_seed(1)
    mlp = MLP(5, 4, hidden=9, depth=4, activation="identity", bias=bias).double()
    one = collapse_linear(mlp)
    assert one.weight.shape == (4, 5)
    x = torch.randn(32, 5, dtype=torch.float64)
    torch.testing.assert_close(one(x), mlp(x))


def test_collapse_refuses_a_nonlinear_mlp():
    with pytest.raises(ValueError, match="activation='identity'"):
        collapse_linear(MLP(3, 3, activation="relu"))
    with pytest.raises(ValueError, match="at least one"):
        collapse_linear([])


def test_perceptron_learns_and_or_but_not_xor():
    for labels in ([0, 0, 0, 1], [0, 1, 1, 1]):  # AND, OR: linearly separable
        torch.manual_seed(0)
        history = Perceptron(2).fit(XOR_X, torch.tensor(labels), epochs=50)
        assert history[-1] == 1.0
    for seed in range(20):
        torch.manual_seed(seed)
        history = Perceptron(2).fit(XOR_X, torch.tensor([0, 1, 1, 0]), epochs=50)
        assert len(history) == 50 and max(history) <= 0.75
    with pytest.raises(ValueError, match="fit expects"):
        Perceptron(2).fit(XOR_X, torch.tensor([0, 1]))


def test_best_linear_accuracy_on_logic_gates():
    assert best_linear_accuracy(XOR_X, torch.tensor([0, 1, 1, 0])) == 0.75
    assert best_linear_accuracy(XOR_X, torch.tensor([0, 0, 0, 1])) == 1.0
    with pytest.raises(ValueError, match=r"must be \(n, 2\)"):
        best_linear_accuracy(torch.zeros(4, 3), torch.zeros(4))


def test_best_linear_accuracy_beats_random_lines_and_agrees_with_linear_programming():
    optimize = pytest.importorskip("scipy.optimize")
    gen = torch.Generator().manual_seed(0)
    for _ in range(12):
        x = torch.randn(8, 2, generator=gen, dtype=torch.float64)
        y = torch.randint(0, 2, (8,), generator=gen)
        best = best_linear_accuracy(x, y)
        # no random line does better than the exhaustive search
        w = torch.randn(20_000, 2, generator=gen, dtype=torch.float64)
        b = torch.randn(20_000, generator=gen, dtype=torch.float64) * 2
        acc = ((x @ w.T + b > 0) == y[:, None].bool()).double().mean(0).max().item()
        assert acc <= best + 1e-12
        # separable exactly when some (w, b) has s_i (w.x_i + b) >= 1 for all i (an LP feasibility problem)
        s = (2 * y - 1).double().numpy()
        a_ub = -s[:, None] * torch.cat([x, torch.ones(8, 1, dtype=torch.float64)], 1).numpy()
        lp = optimize.linprog(c=[0, 0, 0], A_ub=a_ub, b_ub=-torch.ones(8).numpy(), bounds=[(None, None)] * 3)
        assert (lp.status == 0) == (best == 1.0)


def test_trace_shapes_follows_the_gpt_forward():
    cfg = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32)
    model = GPT(cfg)
    idx = torch.zeros(3, 10, dtype=torch.long)
    records = trace_shapes(model, idx)
    by_name = {r.name: r for r in records}
    assert records[0].name == "wte" and records[-1].name == "head"
    assert by_name["wte"].output == (3, 10, 32)
    assert by_name["blocks.1.attn.qkv"].output == (3, 10, 96)
    assert by_name["blocks.0.mlp.fc"].output == (3, 10, 128)
    assert by_name["head"].output == (3, 10, 64) and by_name["head"].kind == "Linear"
    # a ModuleList is iterated, never called, so "blocks" itself leaves no record
    assert [r.name for r in trace_shapes(model, idx, max_depth=1)] == ["wte", "wpe", "drop", "ln_f", "head"]
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_exact_and_tanh_gelu_differ_by_less_than_the_stated_bound():
    """model.Activation uses the exact erf GELU; GPT-2 used the tanh form. The comment there states the gap."""
    import torch.nn.functional as F

    x = torch.linspace(-10, 10, 200_001, dtype=torch.float64)
    gap = (F.gelu(x) - F.gelu(x, approximate="tanh")).abs().max().item()
    assert 4.0e-4 < gap < 4.8e-4


# --- the KV cache (chapter 6) -------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra", [{}, {"bias": False}, {"n_experts": 4, "top_k": 2, "balance": "aux"}], ids=["dense", "no-bias", "moe"]
)
def test_kv_cache_logits_equal_the_uncached_model_also_past_the_context(extra):
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=48, block_size=12, n_layer=2, n_head=2, n_embd=24, dropout=0.1, **extra)
    model = GPT(cfg).eval()
    idx = torch.randint(0, 48, (3, 5))  # (B, T) prompt
    cache = KVCache(cfg, 3)
    window, new, worst, rebuilt = idx, 5, 0.0, 0
    for _ in range(30):  # windows of 5, 6, ..., 12 tokens, then 22 that slide along
        before = cache.length
        cached = model.next_logits(window, new, cache)  # (B, V)
        rebuilt += cache.length < before + new  # the cache was refilled from the slid window
        full = model(window)[0][:, -1]  # the model on its last block_size tokens, as training saw them
        worst = max(worst, (cached - full).abs().max().item())
        nxt = torch.randint(0, 48, (3, 1))
        window, new = torch.cat([window, nxt], dim=1)[:, -cfg.block_size :], 1
    assert worst < 1e-5
    assert rebuilt == 30 - (cfg.block_size - 5 + 1)  # once per step after the window is full: it slid
    gen = lambda use: model.generate(idx, 30, top_k=10, generator=torch.Generator().manual_seed(1), use_cache=use)  # noqa: E731
    assert torch.equal(gen(True), gen(False))


def test_kv_cache_prefill_in_chunks_equals_one_pass():
    torch.manual_seed(1)
    cfg = GPTConfig(vocab_size=32, block_size=16, n_layer=2, n_head=4, n_embd=32)
    model = GPT(cfg).eval()
    idx = torch.randint(0, 32, (2, 16))
    cache = KVCache(cfg, 2)
    with torch.no_grad():
        parts = [model(idx[:, a:b], cache=cache)[0] for a, b in ((0, 5), (5, 6), (6, 16))]  # causal mask offset
        torch.testing.assert_close(torch.cat(parts, dim=1), model(idx)[0], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="16 cached \\+ 1 new tokens exceed the KV cache's capacity of 16"):
        model(idx[:, :1], cache=cache)


def test_kv_cache_holds_two_tensors_per_layer_of_tokens_by_width():
    cfg = GPTConfig(vocab_size=32, block_size=20, n_layer=3, n_head=2, n_embd=16)
    for dtype, size in ((torch.float32, 4), (torch.bfloat16, 2)):
        cache = KVCache(cfg, batch_size=5, capacity=20, dtype=dtype)
        assert cache.nbytes == 2 * cfg.n_layer * 20 * cfg.n_embd * size * 5 == sum(t.nbytes for t in cache.tensors())
    with pytest.raises(ValueError, match="capacity <= block_size=20"):
        KVCache(cfg, capacity=21)


def test_the_model_package_stays_in_modules_a_reader_can_hold():
    """model.py had grown to 615 lines: configuration, attention, blocks, the GPT, its cache, chapter 2's
    perceptron and shape tracing in one file.  Each is now a module under 300 lines, drawn in the package's
    docstring; a module imports only those drawn above it, and the package re-exports every name."""
    check_layout("gputrain.model")
    check_exports("gputrain.model")

"""gputrain.scaling (chapter 14): counting, the sweep's plan, the three Chinchilla fits and their intervals."""

import math

import numpy as np
import pytest
import torch
from package_layout import check_exports, check_layout

from gputrain import scaling as S
from gputrain.device import peak_flops
from gputrain.flops import gpt_train_flops_per_token, matmul_params
from gputrain.model import GPT

TRUE = S.LawFit(E=0.9, A=40.0, B=120.0, alpha=0.4, beta=0.33)  # a law the synthetic runs are drawn from


def synthetic_runs(law=TRUE, noise=0.004, seed=0, budgets=(1e11, 3e11, 1e12, 3e12, 1e13), sizes=6):
    """Run records as the sweep writes them, with losses drawn from ``law`` (FLOPs = 6ND exactly)."""
    rng = np.random.default_rng(seed)
    runs = []
    for C in budgets:
        center = law.optimal(C)[0]
        for N in center * np.geomspace(1 / 6, 6, sizes):
            D = C / (6 * N)
            loss = float(law.loss(N, D) * math.exp(rng.normal(0, noise)))
            curve = [(s, float(law.loss(N, D * s / 100)) + 0.01) for s in range(10, 101, 10)]
            runs.append({"budget": C, "params": {"total": N, "non_embedding": 0.9 * N, "flops": N}, "tokens": D,
                         "flops": C, "loss": loss, "steps": 100, "flops_per_token": 6 * N, "curve": curve})  # fmt: skip
    return runs


def test_the_scaling_package_stays_in_modules_a_reader_can_hold():
    check_layout("gputrain.scaling")
    check_exports("gputrain.scaling")


@pytest.mark.parametrize("shape", [S.LADDER[0], S.LADDER[6], S.Shape(4, 128, 8)])
def test_parameter_counts_match_a_built_gpt(shape):
    cfg = shape.gpt_config(S.BLOCK_SIZE)
    model = GPT(cfg)
    counts = S.parameter_counts(cfg)
    assert counts["total"] == sum(p.numel() for p in model.parameters())
    assert counts["flops"] == matmul_params(model)
    assert counts["non_embedding"] == counts["total"] - model.wte.weight.numel() - model.wpe.weight.numel()
    assert S.flops_per_token(cfg) == gpt_train_flops_per_token(model)
    assert 0 < S.attention_share(cfg) < 0.5


def test_the_sweep_plan_spends_each_budget_and_slides_its_sizes():
    budgets = [1.25e11 * 2 ** (k / 2) for k in range(5)]
    plans = S.plan_sweep(budgets)
    assert len(plans) == 30 and len({(p.budget, p.shape) for p in plans}) == 30
    for p in plans:
        per_step = S.flops_per_token(p.shape.gpt_config(S.BLOCK_SIZE)) * S.TOKENS_PER_STEP
        assert abs(p.flops - p.budget) <= per_step / 2 + 1  # whole steps: within half a step of the budget
        assert p.warmup == max(1, p.steps // 20) and p.lr == pytest.approx(3e-3 * math.sqrt(64 / p.shape.n_embd))
    firsts = [min(S.LADDER.index(p.shape) for p in plans if p.budget == b) for b in budgets]
    assert firsts == [0, 0, 0, 0, 1]
    with pytest.raises(ValueError, match="positive"):
        S.plan_run(S.LADDER[0], float("nan"))


def test_a_run_config_trains_the_planned_steps_with_its_own_cosine():
    cfg = S.train_config(S.plan_run(S.LADDER[0], 2e10), corpus_bytes=100_000, cache_dir="none")
    assert cfg.schedule == "cosine" and cfg.schedule_length == cfg.max_steps == S.plan_run(S.LADDER[0], 2e10).steps
    assert cfg.batch_size * cfg.block_size == S.TOKENS_PER_STEP


def test_curve_bins_average_the_losses():
    losses = [float(i) for i in range(1, 101)]
    c = S.curve(losses, points=10)
    assert [s for s, _ in c] == list(range(10, 101, 10)) and c[0][1] == pytest.approx(5.5)
    assert S.spread_indices(10, 4) == [0, 2, 5, 7] and S.spread_indices(3, 10) == [0, 1, 2]


def test_the_hand_written_gradient_matches_autograd_free_differences():
    runs = synthetic_runs()
    p = S.arrays(runs)
    logs = np.log(p["N"]), np.log(p["D"]), np.log(p["L"])
    theta = np.array([3.0, 4.0, -0.2, 0.35, 0.3])
    _, g = S.objective_and_gradient(theta, *logs)
    eye = np.eye(5) * 1e-7
    num = [(S.objective_and_gradient(theta + e, *logs)[0] - S.objective_and_gradient(theta - e, *logs)[0]) / 2e-7
           for e in eye]  # fmt: skip
    np.testing.assert_allclose(g, num, rtol=1e-4, atol=1e-9)


def test_the_parametric_fit_recovers_known_constants_within_its_bootstrap_interval():
    torch.set_num_threads(1)
    runs = synthetic_runs()
    p = S.arrays(runs)
    law, boots = S.bootstrap_law(p["N"], p["D"], p["L"], n_boot=30, seed=1, grid_start=False)
    est = S.law_estimates(law, boots)
    truth = TRUE.constants()
    for k in ("E", "A", "B", "alpha", "beta", "a", "b"):
        assert est[k].contains(truth[k]), f"{k}: true {truth[k]:.4g} outside {est[k]}"
    assert abs(law.a - TRUE.a) < 0.05 and abs(law.E - TRUE.E) < 0.1


def test_isoflop_parabolas_find_each_budget_optimum():
    runs = synthetic_runs(noise=0.0)
    fit = S.isoflop_fit(runs)
    assert all(fit["inside"])
    for C, N in zip(fit["budget"], fit["N_opt"]):
        assert N == pytest.approx(TRUE.optimal(C)[0], rel=0.1)
    assert fit["a"] == pytest.approx(TRUE.a, abs=0.02) and fit["b"] == pytest.approx(TRUE.b, abs=0.02)
    point, est = S.bootstrap_isoflop(synthetic_runs(), n_boot=40)
    assert est["a"].contains(TRUE.a) or abs(point["a"] - TRUE.a) < 0.03
    with pytest.raises(ValueError, match="no minimum"):
        S.fit_parabola([1, 2, 4, 8], [1.0, 2.0, 2.5, 2.6])


def test_the_envelope_picks_the_lowest_curve_and_its_exponent_has_the_right_sign():
    runs = synthetic_runs(noise=0.0)
    env = S.envelope_fit(runs, points=15)
    assert len(env["C"]) == 15 and env["a"] > 0 and env["b"] > 0
    for C, L in zip(env["C"], env["L"]):
        reached = [S.run_curve(r) for r in runs]
        assert L == pytest.approx(min(np.interp(np.log(C), np.log(c), v) for c, v in reached if c[0] <= C <= c[-1]))


def test_bad_run_records_get_one_clear_error():
    with pytest.raises(ValueError, match="at least 5"):
        S.arrays([])
    bad = synthetic_runs()
    bad[3]["loss"] = float("nan")
    with pytest.raises(ValueError, match="run 3"):
        S.arrays(bad)
    with pytest.raises(ValueError, match="count"):
        S.arrays(synthetic_runs(), count="embedding")


def test_interval_and_resamples():
    est = S.interval(1.0, np.linspace(0, 2, 101))
    assert est.lo == pytest.approx(0.05) and est.hi == pytest.approx(1.95) and est.contains(1.0)
    assert S.case_resamples(5, 3, seed=0).shape == (3, 5)
    with pytest.raises(ValueError, match="too few"):
        S.interval(1.0, [1.0, float("nan")])


def test_published_laws_give_the_papers_answers():
    # Chinchilla's printed constants: a = beta / (alpha + beta) = 0.28 / 0.62
    assert S.CHINCHILLA.a == pytest.approx(0.4516, abs=1e-4)
    N, D = S.CHINCHILLA.optimal(5.76e23)  # Gopher's budget
    assert 6 * N * D == pytest.approx(5.76e23)
    # Besiroglu et al.'s refit is near Chinchilla's 20 tokens per parameter at that budget
    best = S.compute_optimal(S.BESIROGLU, 5.76e23)
    assert 15 < best["tokens_per_param"] < 30
    with pytest.raises(ValueError, match="positive"):
        S.compute_optimal(S.CHINCHILLA, 0.0)


def test_the_bill_of_deepseek_v3():
    v3 = S.DEEPSEEK_V3
    assert v3.flops == pytest.approx(6 * 37e9 * 14.8e12)
    bf16, fp8 = v3.implied_mfu(peak_flops("bf16", "H800")), v3.implied_mfu(peak_flops("fp8", "H800"))
    assert fp8 == pytest.approx(bf16 / 2, rel=1e-3) and 0.3 < bf16 < 0.4
    assert v3.cost() == pytest.approx(5.576e6)
    llama = S.LLAMA_31_405B
    assert 0.3 < llama.implied_mfu(peak_flops("bf16", "H100")) < 0.45
    assert S.dollars_per_million_tokens(1e6 / 3600, 2.0) == pytest.approx(2.0)
    assert S.gpu_seconds(1e18, 1e15, mfu=0.5) == pytest.approx(2000.0)


def test_predict_run_avoids_repeating_data_and_gives_an_interval():
    runs = synthetic_runs()
    p = S.arrays(runs)
    law, boots = S.bootstrap_law(p["N"], p["D"], p["L"], n_boot=12, seed=0, grid_start=False)
    fits = {"count": "total", "parametric": {"law": law.as_dict(), "boots": [b.as_dict() for b in boots]}}
    pred = S.predict_run(fits, 5e12, max_tokens=3e7)
    assert pred["tokens"] <= 3e7 and pred["interval"][0] <= pred["loss"] <= pred["interval"][1]
    allowed = [c for c in pred["candidates"] if not c["repeats"]]
    assert pred["loss"] == min(c["loss"] for c in allowed)
    with pytest.raises(ValueError, match="repeat"):
        S.predict_run(fits, 5e12, max_tokens=10)


def test_fit_all_keeps_going_when_an_approach_cannot_be_fitted():
    runs = synthetic_runs()
    for r in runs:  # every budget's loss rises with size: no IsoFLOP curve has its bottom inside
        r["loss"] = 2.0 + r["params"]["total"] / 1e9
    fits = S.fit_all(runs, n_boot=10)
    assert set(fits["isoflop"]) == {"error"} and fits["isoflop"]["error"].count("\n") == 0
    assert set(fits["parametric"]) == {"law", "estimates", "boots"} and len(fits["parametric"]["boots"]) == 10

"""The 3-D layout planner (a model): memory from gputrain.memory, communication from the ring formula."""

import pytest

from gputrain.memory import estimate
from gputrain.model import gpt_num_params
from gputrain.parallel import planner, ring_all_reduce_time

GPT3, CLUSTER = planner.gpt3(), planner.h100_cluster(1024)


def test_gpt3_shape_has_175b_parameters():
    assert gpt_num_params(GPT3) == pytest.approx(175e9, rel=0.01)


def test_bad_layouts_raise_clear_errors():
    with pytest.raises(ValueError, match="degree 5 does not divide the hidden size 12288"):
        planner.evaluate(GPT3, CLUSTER, tp=5, pp=1, global_batch=1536)
    with pytest.raises(ValueError, match="cannot split 96 layers into 128 pipeline stages"):
        planner.evaluate(GPT3, CLUSTER, tp=8, pp=128, global_batch=1536)
    with pytest.raises(ValueError, match="does not divide the cluster"):
        planner.evaluate(GPT3, CLUSTER, tp=8, pp=3, global_batch=1536)
    with pytest.raises(ValueError, match="whole number of nodes"):
        planner.Cluster(gpus=12, gpus_per_node=8)


def test_layout_arithmetic():
    lay = planner.evaluate(GPT3, CLUSTER, tp=8, pp=8, global_batch=1536)
    assert (lay.dp, lay.microbatches) == (16, 96)
    assert lay.seconds["bubble"] == pytest.approx(lay.seconds["compute"] * 7 / 96)
    grads = 2 * gpt_num_params(GPT3) / 64  # bf16 gradients of this GPU's 1/(t p) of the model
    assert lay.seconds["DP comm"] == pytest.approx(ring_all_reduce_time(grads, 16, CLUSTER.network))
    assert lay.links == {"TP": "NVLink", "PP": "network", "DP": "network"}
    # model states: 16 bytes per parameter under ZeRO-1, as gputrain.memory counts them
    stage_params = (96 // 8 * (12 * 12288**2 + 13 * 12288) + 50257 * 12288) / 8  # 12 layers + embedding
    states = estimate(stage_params, zero_stage=1, dp=16)
    assert lay.memory["weights"] == states.parameters == 2 * stage_params


def test_the_best_layouts_keep_tensor_parallelism_inside_a_node():
    layouts = planner.plan(GPT3, CLUSTER, global_batch=1536)
    best = planner.best(layouts)
    assert best.fits and best.tp <= CLUSTER.gpus_per_node
    inside = planner.evaluate(GPT3, CLUSTER, tp=8, pp=8, global_batch=1536)
    across = planner.evaluate(GPT3, CLUSTER, tp=16, pp=8, global_batch=1536)
    assert across.links["TP"] == "network"
    assert across.seconds["TP comm"] > 9 * inside.seconds["TP comm"]
    assert across.step_seconds > 2 * best.step_seconds


def test_recomputation_trades_memory_for_compute():
    plain = planner.evaluate(GPT3, CLUSTER, tp=8, pp=8, global_batch=1536)
    recompute = planner.evaluate(GPT3, CLUSTER, tp=8, pp=8, global_batch=1536, recompute=True)
    assert recompute.memory["activations"] < plain.memory["activations"] / 10
    assert recompute.seconds["compute"] == pytest.approx(plain.seconds["compute"] * 4 / 3, rel=0.02)


def test_sequence_parallelism_is_an_explicit_switch():
    sp = planner.evaluate(GPT3, CLUSTER, tp=8, pp=8, global_batch=1536)
    no_sp = planner.evaluate(GPT3, CLUSTER, tp=8, pp=8, global_batch=1536, sequence_parallel=False)
    s, b, h, a = 2048, 1, 12288, 96
    attention = 5 * a * s / (h * 8)
    per_layer = {True: s * b * h * (34 / 8 + attention), False: s * b * h * (10 + 24 / 8 + attention)}
    for lay, flag in ((sp, True), (no_sp, False)):  # 12 layers on the first stage, 8 micro-batches in flight
        assert lay.memory["activations"] == pytest.approx(per_layer[flag] * 12 * 8)
    assert no_sp.label().endswith("(no SP)") and sp.seconds == no_sp.seconds


def long_context_model():
    from gputrain.model import GPTConfig

    return GPTConfig(vocab_size=128256, block_size=131072, n_layer=80, n_head=64, n_embd=8192)  # 70B, 128k


def test_context_parallelism_splits_the_sequence_and_makes_a_long_context_fit_inside_nodes():
    model, cluster = long_context_model(), planner.h100_cluster(256)
    one = planner.evaluate(model, cluster, tp=8, pp=2, global_batch=16, flash_attention=True)
    two = planner.evaluate(model, cluster, tp=8, pp=1, global_batch=16, cp=2, flash_attention=True)
    four = planner.evaluate(model, cluster, tp=8, pp=1, global_batch=16, cp=4, flash_attention=True)
    assert four.memory["activations"] == pytest.approx(two.memory["activations"] / 2)
    assert two.seconds["CP comm"] > 0 and two.links["CP"] == "network" and "CP" not in one.links
    without = planner.best(planner.plan(model, cluster, global_batch=16, flash_attention=True))
    best = planner.best(planner.plan(model, cluster, global_batch=16, context=True, flash_attention=True))
    assert best.cp > 1 and best.tp <= cluster.gpus_per_node and best.step_seconds < 0.7 * without.step_seconds
    assert without.cp == 1 and (without.tp > cluster.gpus_per_node or without.seconds["bubble"] > 0)
    with pytest.raises(ValueError, match="not divisible by 2 x CP degree = 6"):
        planner.evaluate(model, cluster, tp=8, pp=1, global_batch=16, cp=3)


def test_the_planner_package_stays_in_modules_a_reader_can_hold():
    """planner.py had grown to 537 lines; its cluster, memory, expert traffic, step time, search and drawing
    are now modules under 300 lines whose imports flow one way, and every name is still planner.<name>."""
    from package_layout import check_exports, check_layout

    check_layout("gputrain.parallel.planner")
    check_exports("gputrain.parallel.planner")

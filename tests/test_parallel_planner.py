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

"""Expert parallelism in gputrain.memory (expert_parallel_memory) and the layout planner (chapter 9)."""

import pytest

from gputrain import memory, moe
from gputrain.model import GPT, GPTConfig, gpt_num_params
from gputrain.parallel import planner

SMALL = GPTConfig(vocab_size=96, block_size=32, n_layer=4, n_head=4, n_embd=32, n_experts=8, top_k=2, moe_first_dense=1)
V3, H800 = planner.deepseek_v3(), planner.h800_cluster()
V3_RUN = {"global_batch": 15360, "micro_batch": 1, "flash_attention": True, "precision": "fp8-deepseek-v3"}


def _routed_in_modules(model) -> int:
    return sum(p.numel() for m in model.modules() if isinstance(m, moe.MoE) for p in m.experts.parameters())


def test_moe_shape_agrees_with_the_module_counts():
    model, shape = GPT(SMALL), memory.moe_shape(SMALL)
    assert (shape.params, shape.active) == moe.count_moe_params(model)
    assert shape.routed == _routed_in_modules(model)
    stages = [memory.stage_params(shape, 2, s) for s in range(2)]
    assert sum(s["replicated"] + s["routed"] for s in stages) == sum(p.numel() for p in model.parameters())


def test_expert_memory_counts_module_bytes_per_rank():
    model, shape = GPT(SMALL), memory.moe_shape(SMALL)
    routed = _routed_in_modules(model)
    replicated = sum(p.numel() for p in model.parameters()) - routed
    mem = memory.expert_parallel_memory(shape, ep=4, dp=8, zero_stage=1, precision="bf16-mixed")
    assert mem["expert weights"] == 2 * routed / 4 and mem["expert gradients"] == 2 * routed / 4
    assert mem["expert optimizer"] == pytest.approx(12 * routed / 4 / 2)  # ZeRO-1 over the dp / ep = 2 copies
    assert mem["replicated weights"] == 2 * replicated
    assert mem["replicated optimizer"] == pytest.approx(12 * replicated / 8)
    busy = memory.expert_parallel_memory(shape, ep=4, dp=8, tokens=64, in_flight=3, a2a_bytes=2)
    moe_layers = sum(isinstance(m, moe.MoE) for m in model.modules())
    assert busy["all-to-all buffers"] == 2 * 64 * SMALL.top_k * SMALL.n_embd * 2 * moe_layers * 3  # N k C each way


def test_ep1_reduces_to_the_dense_and_moe_counts():
    shape = memory.moe_shape(SMALL)
    one = memory.expert_parallel_memory(shape, ep=1, dp=4, zero_stage=1)
    dense = memory.estimate(float(gpt_num_params(SMALL)), zero_stage=1, dp=4)  # all params, one rank's share
    weights = one["replicated weights"] + one["expert weights"]
    assert weights == pytest.approx(dense.parameters)
    assert one["replicated gradients"] + one["expert gradients"] == pytest.approx(dense.gradients)
    optim = one["replicated optimizer"] + one["expert optimizer"]
    # estimate also counts Adam's step counter (4 bytes per tensor); the rest is identical
    assert optim == pytest.approx(dense.master_weights + dense.optimizer_states, rel=1e-3)


def test_deepseek_v3_shape_matches_the_published_counts():
    counts = moe.deepseek_v3_params()
    assert V3.params == counts["total"] + counts["mtp"]
    main_active = V3.active - (V3.extra_last + V3.moe_replicated + V3.top_k * V3.expert)  # without MTP
    assert main_active == counts["active"]


def test_the_deepseek_v3_layout_fits_and_the_same_layout_without_ep_does_not():
    lay = planner.evaluate(V3, H800, tp=1, pp=16, ep=64, **V3_RUN)
    assert lay.fits and lay.memory_total < 80e9 and lay.dp == 128 and lay.microbatches == 120
    assert lay.memory["expert weights"] == pytest.approx(4 * 256 // 64 * V3.expert)  # 4 MoE layers, 1 byte each
    no_ep = planner.evaluate(V3, H800, tp=1, pp=16, ep=1, **V3_RUN)
    assert not no_ep.fits and no_ep.memory["expert weights"] == 64 * lay.memory["expert weights"]
    assert lay.seconds["EP comm"] > 0 and lay.links["EP"] == "NVLink + network" and no_ep.seconds["EP comm"] == 0
    # compute counts the active parameters: 6 x ~37 B per token, not 6 x 685 B
    dense_like = 6 * V3.params * 15360 * 4096 / (2048 * H800.peak_flops * H800.efficiency)
    assert lay.seconds["compute"] < dense_like / 10


def test_all_to_all_traffic_formula_and_links():
    assert planner.all_to_all_bytes(4096, 8, 7168, 64, 1) == 2 * 4096 * 8 * 7168 * 63 / 64
    assert planner.all_to_all_bytes(4096, 8, 7168, 1, 1) == 0
    inside = planner.evaluate(V3, H800, tp=1, pp=16, ep=8, **V3_RUN)  # one node
    across = planner.evaluate(V3, H800, tp=1, pp=16, ep=64, **V3_RUN)  # eight nodes
    assert inside.links["EP"] == "NVLink"
    per_layer = planner.all_to_all_bytes(4096, 8, 7168, 8, 1)
    moe_layers = (58 + 1) / 16
    assert inside.seconds["EP comm"] == pytest.approx(per_layer / H800.nvlink * moe_layers * 120 * 2)
    assert across.seconds["EP comm"] > 3 * inside.seconds["EP comm"]


def test_bad_expert_parallel_inputs_raise_one_clear_error_each():
    with pytest.raises(ValueError, match="EP group size 3 does not divide the world of 2048 GPUs"):
        planner.evaluate(V3, H800, tp=1, pp=16, ep=3, **V3_RUN)
    with pytest.raises(ValueError, match="256 experts do not split evenly over 512"):
        planner.evaluate(V3, H800, tp=1, pp=4, ep=512, **V3_RUN)
    with pytest.raises(ValueError, match="needs a model with routed experts"):
        planner.evaluate(planner.gpt3(), planner.h100_cluster(1024), tp=8, pp=8, global_batch=1536, ep=2)
    with pytest.raises(ValueError, match="8 experts do not split evenly over EP3"):
        memory.expert_parallel_memory(memory.moe_shape(SMALL), ep=3, dp=6)
    with pytest.raises(ValueError, match="EP4 does not divide DP2"):
        memory.expert_parallel_memory(memory.moe_shape(SMALL), ep=4, dp=2)


def test_plan_searches_ep_and_keeps_dense_layouts_unchanged():
    layouts = planner.plan(memory.moe_shape(SMALL), planner.h100_cluster(16), global_batch=32, expert=True)
    assert {lay.ep for lay in layouts} == {1, 2, 4, 8}
    dense = planner.evaluate(planner.gpt3(), planner.h100_cluster(1024), tp=8, pp=8, global_batch=1536)
    assert dense.seconds["EP comm"] == 0 and "EP" not in dense.links and dense.ep == 1


def test_node_limited_routing_halves_deepseek_v3s_network_traffic():
    free = planner.evaluate(V3, H800, tp=1, pp=16, ep=64, **V3_RUN)
    limited = planner.evaluate(V3, H800, tp=1, pp=16, ep=64, nodes_per_token=4, **V3_RUN)
    # free: 8 rows x 56/64 leave the node per token; limited: once per node, 4 x 7/8 other nodes
    assert limited.seconds["EP comm"] == pytest.approx(free.seconds["EP comm"] * (4 * 7 / 8) / (8 * 56 / 64))
    assert limited.memory == free.memory
    capped = planner.evaluate(V3, H800, tp=1, pp=16, ep=64, nodes_per_token=9, **V3_RUN)  # only 8 nodes exist
    assert capped.seconds == planner.evaluate(V3, H800, tp=1, pp=16, ep=64, nodes_per_token=8, **V3_RUN).seconds
    with pytest.raises(ValueError, match="nodes_per_token must be >= 1"):
        planner.evaluate(V3, H800, tp=1, pp=16, ep=64, nodes_per_token=0, **V3_RUN)

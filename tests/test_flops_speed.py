"""gputrain.flops and gputrain.speed (chapter 2).

Counted FLOPs against torch's counter and closed forms; throughput probes.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from gputrain.device import median_seconds
from gputrain.flops import (
    ELEMENTWISE_FLOPS,
    count_flops,
    forward_flops_per_token,
    loglog_slope,
    matmul_params,
    train_flops_per_token,
)
from gputrain.model import GPT, MLP, GPTConfig
from gputrain.speed import copy_bandwidth, matmul_tflops


def test_linear_layer_costs_2_b_in_out_like_torchs_counter():
    layer = torch.nn.Linear(24, 40)
    x = torch.randn(7, 24)
    with FlopCounterMode(display=False) as ref:
        layer(x)
    ours = count_flops(layer, x, elementwise=False)
    assert ours.total == ref.get_total_flops() == 2 * 7 * 24 * 40
    assert ours.matmul_share() == 1.0


def test_elementwise_costs_follow_the_table():
    x = torch.randn(3, 5, 11)
    assert count_flops(F.gelu, x).by_op == {"aten.gelu": ELEMENTWISE_FLOPS["gelu"] * x.numel()}
    ln = torch.nn.LayerNorm(11)
    assert count_flops(ln, x).total == ELEMENTWISE_FLOPS["native_layer_norm"] * x.numel()
    assert count_flops(F.gelu, x, elementwise_scale=2).total == 2 * ELEMENTWISE_FLOPS["gelu"] * x.numel()
    assert count_flops(F.gelu, x, elementwise=False).total == 0


@pytest.mark.parametrize("causal", [True, False])
def test_cpu_attention_kernel_counts_like_the_explicit_products(causal):
    B, H, T, D = 2, 3, 40, 16
    q, k, v = torch.randn(3, B, H, T, D).unbind(0)
    fused = count_flops(F.scaled_dot_product_attention, q, k, v, is_causal=causal, elementwise=False)
    assert fused.by_op.keys() == {"aten._scaled_dot_product_flash_attention_for_cpu"}

    def explicit(q, k, v):
        scores = q @ k.transpose(-2, -1) / math.sqrt(D)  # (B, H, T, T)
        return scores.softmax(-1) @ v  # (B, H, T, D)

    with FlopCounterMode(display=False) as ref:
        explicit(q, k, v)
    assert fused.total == ref.get_total_flops() == 4 * B * H * T * T * D


@pytest.mark.parametrize("bias,T", [(True, 32), (False, 24)])
def test_gpt_forward_is_2n_plus_attention_per_token(bias, T):
    cfg = GPTConfig(vocab_size=96, block_size=32, n_layer=3, n_head=4, n_embd=48, bias=bias)
    model = GPT(cfg)
    idx = torch.randint(0, 96, (2, T))
    with torch.no_grad():
        counted = count_flops(model, idx, elementwise=False)
    n = matmul_params(model)
    assert n == cfg.n_layer * 12 * cfg.n_embd**2 + cfg.vocab_size * cfg.n_embd  # tied head counted once
    assert counted.total == 2 * T * forward_flops_per_token(n, cfg.n_layer, T, cfg.n_embd)


def test_training_step_is_three_forwards_for_the_weights():
    cfg = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32)
    model = GPT(cfg)
    idx = torch.randint(0, 64, (2, 16))

    def step():
        _, loss = model(idx, idx)
        loss.backward()

    fwd = count_flops(lambda: model(idx), elementwise=False)
    train = count_flops(step, elementwise=False)
    attn_fwd = fwd.by_op["aten._scaled_dot_product_flash_attention_for_cpu"]
    attn_bwd = train.by_op["aten._scaled_dot_product_flash_attention_for_cpu_backward"]
    weights_train = train.total - attn_fwd - attn_bwd
    assert weights_train == 3 * (fwd.total - attn_fwd) == 32 * 6 * matmul_params(model)
    assert attn_bwd == pytest.approx(2.5 * attn_fwd)  # flash backward recomputes the scores
    assert train_flops_per_token(10, 1, 2, 3) == 3 * forward_flops_per_token(10, 1, 2, 3) == 3 * (20 + 24)


def test_matmuls_dominate_a_gpt2_small_forward_counted_on_meta():
    cfg = GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)
    with torch.device("meta"):
        model = GPT(cfg)
        idx = torch.zeros(1, 1024, dtype=torch.long)
    counted = count_flops(model, idx)
    assert counted.matmul_share() > 0.99
    assert count_flops(model, idx, elementwise_scale=2.0).matmul_share() > 0.98
    assert abs(sum(counted.shares().values()) - 1.0) < 1e-9
    assert counted.matmul == 1024 * forward_flops_per_token(matmul_params(model), 12, 1024, 768)
    assert counted.by_module["GPT.head"] == 2 * 1024 * 768 * 50257


def test_mlp_flops():
    mlp = MLP(10, 3, hidden=20, depth=3)
    counted = count_flops(mlp, torch.randn(5, 10), elementwise=False)
    assert counted.total == 2 * 5 * (10 * 20 + 20 * 20 + 20 * 3) == 2 * 5 * matmul_params(mlp)


def test_loglog_slope_recovers_exponents():
    xs = [128, 256, 512, 1024]
    assert loglog_slope(xs, [3 * x**2 for x in xs]) == pytest.approx(2.0)
    assert loglog_slope(xs, [x * math.log(x) for x in xs]) < 1.2  # n log n is far from n^2


def test_cpu_probes_measure_something_and_refuse_tf32():
    probe = matmul_tflops(128, "fp32", torch.device("cpu"), target_seconds=0.02)
    assert probe.tflops > 0 and probe.peak_tflops is None and probe.fraction_of_peak is None
    assert probe.intensity == pytest.approx(2 * 128 / 12)
    with pytest.raises(ValueError, match="tf32"):
        matmul_tflops(128, "tf32", torch.device("cpu"))
    with pytest.raises(ValueError, match="use one of"):
        matmul_tflops(128, "fp64", torch.device("cpu"))
    assert copy_bandwidth(1 << 20, torch.device("cpu")) > 0
    assert median_seconds(lambda: None, dev=torch.device("cpu"), min_seconds=0.001) > 0  # samples last ~1 ms


@pytest.mark.gpu
def test_gpu_bf16_matmul_reaches_a_real_fraction_of_peak():
    probe = matmul_tflops(8192, "bf16")
    assert probe.peak_tflops is not None, "add this GPU to gputrain.device.PEAK_FLOPS"
    assert 0.3 < probe.fraction_of_peak < 1.05
    tf32 = matmul_tflops(4096, "tf32")
    fp32 = matmul_tflops(4096, "fp32")
    assert tf32.tflops > fp32.tflops  # tensor cores are on only when asked for


def test_time_shares_put_matmuls_below_their_flop_share():
    from gputrain.flops import matmul_fraction
    from gputrain.speed import cpu_threads, time_shares

    torch.manual_seed(0)
    mlp = MLP(64, 64, hidden=64, depth=4, activation="gelu")
    x = torch.randn(256, 64)
    threads = torch.get_num_threads()
    with cpu_threads(1), torch.no_grad():
        times = time_shares(mlp, x)
        flops = count_flops(mlp, x)
    assert torch.get_num_threads() == threads and abs(sum(times.values()) - 1) < 1e-9
    assert "aten.addmm" in times and set(times) >= {"aten.gelu"}
    assert 0 < matmul_fraction(times) < 1 and matmul_fraction(flops.shares()) == flops.matmul_share() > 0.9


def test_native_bf16_is_measured_once_and_reported():
    from gputrain.speed import BF16_SLOW_FACTOR, native_bf16

    first = native_bf16("cpu")
    assert first is native_bf16("cpu")  # cached: measured once per process
    assert first.slowdown > 0
    assert first.native == (first.slowdown < BF16_SLOW_FACTOR)
    assert ("native" in str(first)) and f"{first.slowdown:.1f}x" in str(first)


def test_native_bf16_verdict_can_be_forced_for_the_emulated_path(monkeypatch):
    from gputrain.speed import native_bf16

    measured = native_bf16("cpu")
    monkeypatch.setenv("GPUTRAIN_NATIVE_BF16", "0")
    forced = native_bf16("cpu")
    assert not forced.native and forced.slowdown == measured.slowdown and "GPUTRAIN_NATIVE_BF16=0" in str(forced)
    monkeypatch.setenv("GPUTRAIN_NATIVE_BF16", "1")
    assert native_bf16("cpu").native
    monkeypatch.setenv("GPUTRAIN_NATIVE_BF16", "maybe")
    with pytest.raises(ValueError, match="must be 0 \\(emulate bf16\\) or 1"):
        native_bf16("cpu")
    monkeypatch.delenv("GPUTRAIN_NATIVE_BF16")
    assert native_bf16("cpu") is measured

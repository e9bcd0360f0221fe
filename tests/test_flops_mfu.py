"""gputrain.flops utilization: 6N + 12LTC against counted FLOPs, MFU arithmetic, peaks, the throughput meter."""

import time

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from gputrain.flops import count_flops, gpt_train_flops_per_token, matmul_params, mfu
from gputrain.model import GPT, GPTConfig
from gputrain.speed import ThroughputMeter, count_ops, measured_peak, peak_for_mfu, tokens_per_second


@pytest.mark.parametrize("bias", [True, False])
def test_palm_rule_equals_the_counted_flops_of_a_training_step(bias):
    # With attention on the reference ("math") path every product is a plain
    # matmul, and the backward pass does exactly two products per forward one:
    # the counter must land on 6N + 12LTC per token, not merely near it.
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=97, block_size=32, n_layer=3, n_head=4, n_embd=48, bias=bias)
    model = GPT(cfg)
    B, T = 3, 32
    idx = torch.randint(0, 97, (B, T))

    def step():
        _, loss = model(idx, idx)
        loss.backward()

    with sdpa_kernel(SDPBackend.MATH):
        counted = count_flops(step, elementwise=False)
    n = matmul_params(model)
    assert gpt_train_flops_per_token(model) == 6 * n + 12 * cfg.n_layer * T * cfg.n_embd
    assert counted.total == B * T * gpt_train_flops_per_token(model, T)


def test_gpt2_small_model_flops_per_token():
    with torch.device("meta"):
        model = GPT(GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768))
    n = matmul_params(model)
    assert n == 12 * 12 * 768**2 + 50257 * 768  # 123.5 M: the tied head once, position table free
    assert gpt_train_flops_per_token(model) == 6 * n + 12 * 12 * 1024 * 768
    assert gpt_train_flops_per_token(model, 512) < gpt_train_flops_per_token(model)


def test_mfu_is_achieved_over_peak():
    assert mfu(1000.0, 2e9, 4e12) == pytest.approx(0.5)
    assert mfu(1000.0, 2e9, None) is None
    with pytest.raises(ValueError, match="positive"):
        mfu(1.0, 1.0, 0.0)
    assert tokens_per_second(300, 1.5) == 200
    with pytest.raises(ValueError, match="seconds must be > 0"):
        tokens_per_second(10, 0.0)


def test_cpu_peak_is_measured_and_is_the_best_probe():
    cpu = torch.device("cpu")
    probe = measured_peak(("fp32",), sizes=(32, 64), dev=cpu, target_seconds=0.02)
    assert probe.n in (32, 64) and probe.dtype == "fp32" and probe.tflops > 0
    peak, source = peak_for_mfu("bf16", dev=cpu)  # no datasheet for CPUs: measured even when not asked
    assert peak > 0 and source.startswith("measured")


def test_throughput_meter_takes_the_median_of_timed_blocks():
    meter = ThroughputMeter(torch.device("cpu"))
    with pytest.raises(ValueError, match="no block measured"):
        meter.tokens_per_s
    for pause in (0.02, 0.02, 0.3):  # one block slowed by a busy neighbour
        with meter.measure(tokens=1000):
            time.sleep(pause)
    assert len(meter.rates) == 3
    assert meter.tokens_per_s <= 1000 / 0.02  # sleep never returns early
    assert meter.tokens_per_s > 1000 / 0.3  # the median ignores the slow block


def test_count_ops_counts_calls_and_bytes_read_and_written():
    x = torch.randn(10)  # 40 bytes
    assert count_ops(torch.add, x, x).bytes_moved == 40 + 40 + 40  # two reads, one fresh output
    inplace = count_ops(lambda: x.add_(1))
    assert inplace.calls == {"aten.add_": 1} and inplace.bytes_moved == 40 + 40  # read, then written back


def test_fused_adamw_is_one_operator_and_fewer_bytes():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32))
    params = list(model.parameters())
    n_bytes = sum(p.numel() * 4 for p in params)
    counts = {}
    for name, kwargs in (("loop", {"foreach": False}), ("foreach", {"foreach": True}), ("fused", {"fused": True})):
        opt = torch.optim.AdamW(params, **kwargs)
        for p in params:
            p.grad = torch.randn_like(p)
        opt.step()  # creates the moment buffers
        counts[name] = count_ops(opt.step)
    assert counts["fused"].calls.get("aten._fused_adamw_") == 1
    assert counts["fused"].total < counts["foreach"].total < counts["loop"].total
    assert counts["loop"].total > 8 * len(params)  # several operators per parameter tensor
    # p, g, m, v read and written by one kernel: 8 words per weight, against one pass per operator
    assert counts["fused"].bytes_moved == pytest.approx(8 * n_bytes, rel=0.01)
    assert counts["loop"].bytes_moved > 2 * counts["fused"].bytes_moved


@pytest.mark.gpu
def test_gpu_datasheet_peak_and_a_plausible_mfu():
    peak, source = peak_for_mfu("bf16")
    assert source.startswith("datasheet"), "add this GPU to gputrain.device.PEAK_FLOPS"
    measured, _ = peak_for_mfu("bf16", measured=True)
    assert 0.3 * peak < measured < 1.05 * peak
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50304, block_size=1024, n_layer=12, n_head=12, n_embd=768)).cuda()
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    x = torch.randint(0, 50304, (8, 1024), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            _, loss = model(x, x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    meter = ThroughputMeter()
    for _ in range(3):
        with meter.measure(tokens=3 * x.numel()):
            for _ in range(3):
                step()
    util = mfu(meter.tokens_per_s, gpt_train_flops_per_token(model), peak)
    assert 0.05 < util < 1.0  # eager bf16 GPT-2 small: well above nothing, below the peak

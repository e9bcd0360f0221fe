"""gputrain.fp8 against torch's FP8 dtypes and torch._scaled_mm: formats, scaling, accumulation, Float8Linear."""

import math

import pytest
import torch
import torch.nn as nn
from helpers import SMALL_GPT

from gputrain import fp8
from gputrain.memory import estimate, get_recipe
from gputrain.model import GPT, GPTConfig
from gputrain.precision import FloatFormat, get_format, round_to_format

FMTS = ["e4m3", "e5m2"]


def randn(*shape, seed=0, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


# --- formats ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FMTS)
def test_format_facts_match_finfo_and_bit_patterns(name):
    facts = fp8.format_facts(name)
    f = get_format(name)
    info = torch.finfo(f.dtype)
    assert facts["max"] == facts["finfo max"] == info.max
    assert facts["smallest normal"] == facts["finfo smallest normal"] == info.smallest_normal
    assert facts["values in [1, 2)"] == 2**f.mantissa_bits == {"e4m3": 8, "e5m2": 4}[name]
    values = fp8.representable(name)
    assert values.max().item() == f.max and values.min().item() == -f.max
    assert values[values > 0].min().item() == f.smallest_subnormal
    # E4M3 (fn) spends only S.1111.111 on NaN and has no inf; E5M2 keeps IEEE's inf and NaNs
    assert (facts["NaN codes"], facts["inf codes"]) == {"e4m3": (2, 0), "e5m2": (6, 2)}[name]


@pytest.mark.parametrize("name", FMTS)
def test_representable_values_equal_a_from_scratch_enumeration(name):
    f = get_format(name)
    mine = set()
    for e in range(1 - f.bias, f.max_exponent + 1):  # normals
        for m in range(2**f.mantissa_bits):
            mine.add((1 + m / 2**f.mantissa_bits) * 2.0**e)
    mine |= {m / 2**f.mantissa_bits * 2.0 ** (1 - f.bias) for m in range(2**f.mantissa_bits)}  # subnormals, 0
    mine = {v for v in mine if v <= f.max}
    mine |= {-v for v in mine}
    assert sorted(mine) == fp8.representable(name).tolist()
    ones = fp8.representable(name, 1.0, 2.0)
    assert ones.tolist() == [1 + i / 2**f.mantissa_bits for i in range(2**f.mantissa_bits)]


def test_cast_behaviour_is_measured_not_assumed():
    e5m2 = fp8.cast_behaviour("e5m2", [1e6, 57344.0, 61440.0, float("inf")])
    assert e5m2[0] == math.inf and e5m2[1] == 57344.0 and e5m2[2] == math.inf  # overflow to inf
    e4m3 = fp8.cast_behaviour("e4m3", [500.0, float("inf")])
    # no inf in E4M3: out-of-range becomes ±448 (saturation) or NaN depending on the torch build
    assert all(v == 448.0 or math.isnan(v) for v in e4m3)
    # quantize never relies on either: it clamps first
    q = fp8.quantize(torch.tensor([1.0, 500.0]), "e4m3", "tensor")
    assert torch.isfinite(fp8.dequantize(q)).all()


def test_unknown_format_and_granularity_raise_clear_errors():
    with pytest.raises(ValueError, match="unknown FP8 format 'e3m4'; use 'e4m3' or 'e5m2'"):
        fp8.quantize(torch.ones(4), "e3m4")
    with pytest.raises(ValueError, match="unknown FP8 format 'bf16'"):
        fp8.format_facts("bf16")
    with pytest.raises(ValueError, match="unknown granularity 'column'; use one of: tensor, row, tile, block"):
        fp8.quantize(torch.ones(4), "e4m3", "column")
    with pytest.raises(ValueError, match="unknown Float8Linear granularity 'tile'"):
        fp8.Float8Linear(16, 16, granularity="tile")
    with pytest.raises(ValueError, match="unknown FP8 format"):
        fp8.Float8Linear(16, 16, fmt="int8")


# --- quantize / dequantize -----------------------------------------------------------------------


@pytest.mark.parametrize("name", FMTS)
@pytest.mark.parametrize("granularity", fp8.GRANULARITIES)
def test_round_trip_error_bound(name, granularity):
    f = get_format(name)
    x = randn(300, 200, seed=1) * torch.exp(randn(300, 200, seed=2))  # heavy-ish tails, ragged 128 edges
    q = fp8.quantize(x, name, granularity)
    back = fp8.dequantize(q)
    # each element: half a step of its binade (relative 2^-(m+1)), or half the scaled subnormal step
    per_elem = fp8.dequantize(fp8.Quantized(torch.ones_like(x).to(f.dtype), q.scale, name, granularity, x.shape))
    bound = x.abs() * 2.0 ** -(f.mantissa_bits + 1) + per_elem * f.smallest_subnormal / 2
    assert ((back - x).abs() <= bound * (1 + 1e-6)).all()
    # every group's max-abs lands on the format's max (no range is wasted)
    assert fp8.dequantize_2d(q).abs().max().item() == pytest.approx(x.abs().max().item(), rel=2.0**-f.mantissa_bits)


def test_scale_shapes_and_ragged_edges():
    x = randn(300, 200, seed=3)
    shapes = {g: tuple(fp8.quantize(x, "e4m3", g).scale.shape) for g in fp8.GRANULARITIES}
    assert shapes == {"tensor": (), "row": (300, 1), "tile": (300, 2), "block": (3, 2)}
    tile = fp8.quantize(x, "e4m3", "tile")
    # the last tile of each row is the ragged 72 columns: its scale comes from those alone
    torch.testing.assert_close(tile.scale[:, 1], x[:, 128:].abs().amax(dim=1) / 448)
    block = fp8.quantize(x, "e4m3", "block")
    torch.testing.assert_close(block.scale[2, 1], x[256:, 128:].abs().max() / 448)
    # any leading shape: the last dimension is the inner one
    x3 = randn(4, 75, 200, seed=4)
    q3 = fp8.quantize(x3, "e4m3", "tile")
    assert q3.scale.shape == (300, 2) and fp8.dequantize(q3).shape == x3.shape


def test_quantize_matches_a_plain_torch_cast_with_the_same_scale():
    x = randn(64, 256, seed=5)
    q = fp8.quantize(x, "e4m3", "row")
    s = x.abs().amax(dim=1, keepdim=True) / 448
    torch.testing.assert_close(q.data.float(), (x / s).to(torch.float8_e4m3fn).float(), rtol=0, atol=0)
    # and round_to_format (chapter 7's from-scratch rounding) agrees on the scaled values
    torch.testing.assert_close(q.data.float(), round_to_format(x / s, "fp8_e4m3"), rtol=0, atol=0)


@pytest.mark.parametrize("granularity", fp8.GRANULARITIES)
def test_all_zero_tile_gives_no_nan(granularity):
    x = randn(256, 256, seed=6)
    x[:128, :128] = 0  # one whole block (and 128 whole tiles) of zeros
    if granularity == "tensor":
        x = torch.zeros_like(x)
    q = fp8.quantize(x, "e4m3", granularity)
    back = fp8.dequantize(q)
    assert torch.isfinite(q.scale).all() and torch.isfinite(back).all()
    assert (back[:128, :128] == 0).all()


def _group_of(granularity, r, c, shape, block=fp8.TILE):
    """Mask of the entries that share entry (r, c)'s scale."""
    rows, cols = torch.arange(shape[0])[:, None], torch.arange(shape[1])[None, :]
    same_row, same_tile_col = rows == r, cols // block == c // block
    return {
        "tensor": torch.ones(shape, dtype=torch.bool),
        "row": same_row.expand(shape),
        "tile": same_row & same_tile_col,
        "block": (rows // block == r // block) & same_tile_col,
    }[granularity]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("name", FMTS)
@pytest.mark.parametrize("granularity", fp8.GRANULARITIES)
def test_a_non_finite_input_makes_exactly_its_group_nan(granularity, name, bad):
    # issue 13h: NaN used to leave the rest of its group quantized with scale 1.0
    x = randn(200, 300, seed=8)  # ragged tiles and blocks
    x[130, 260] = bad
    q = fp8.quantize(x, name, granularity)
    back = fp8.dequantize(q)
    group = _group_of(granularity, 130, 260, x.shape)
    assert torch.isnan(back[group]).all(), int(torch.isnan(back[group]).sum())
    assert torch.isfinite(back[~group]).all()
    assert torch.isnan(fp8.fake_quantize(x, name, granularity, pow2_scale=True)[group]).all()


def test_one_outlier_flushes_a_per_tensor_scale_but_not_a_tile():
    x = randn(512, 512, seed=7)
    x[3, 5] = 1e6  # a million times the typical entry
    flushed = {g: fp8.flushed_fraction(x, "e4m3", g) for g in fp8.GRANULARITIES}
    assert flushed["tensor"] > 0.5  # most of the tensor comes back as zero
    assert flushed["row"] < 2 / 512  # only the outlier's row suffers
    assert flushed["tile"] < 128 / x.numel() and flushed["block"] < 128 * 128 / x.numel()
    # the outlier itself survives everywhere
    for g in fp8.GRANULARITIES:
        assert fp8.fake_quantize(x, "e4m3", g)[3, 5].item() == pytest.approx(1e6, rel=0.07)
    # E5M2's 32 binades hold the same tensor with nothing flushed
    assert fp8.flushed_fraction(x, "e5m2", "tensor") < 0.01


def test_power_of_two_scales():
    x = randn(128, 384, seed=8)
    for g in fp8.GRANULARITIES:
        q = fp8.quantize(x, "e4m3", g, pow2_scale=True)
        assert torch.equal(q.scale, torch.exp2(torch.round(torch.log2(q.scale))))  # exact powers of two
        assert fp8.dequantize_2d(q).abs().max() <= x.abs().max()  # no clamping happened
        assert fp8.quantization_error(x, "e4m3", g, pow2_scale=True) < 0.04


def test_transpose_reuses_tensor_and_block_scales_only():
    w = randn(256, 384, seed=9)
    for g in ("tensor", "block"):
        q = fp8.quantize(w, "e4m3", g)
        torch.testing.assert_close(fp8.dequantize(fp8.transpose(q)), fp8.dequantize(q).t(), rtol=0, atol=0)
        # and it is exactly what quantizing the transpose gives
        torch.testing.assert_close(fp8.transpose(q).data.float(), fp8.quantize(w.t(), "e4m3", g).data.float())
    with pytest.raises(ValueError, match="cannot be transposed"):
        fp8.transpose(fp8.quantize(w, "e4m3", "row"))


# --- accumulation ---------------------------------------------------------------------------------


def test_round_mantissa_truncates_like_the_formula():
    x = randn(10_000, seed=10) * 1e3
    for bits in (7, 10, 14):
        ulp = torch.exp2(torch.floor(torch.log2(x.double().abs())) - bits)
        expected = torch.sign(x.double()) * torch.floor(x.double().abs() / ulp) * ulp
        torch.testing.assert_close(fp8.round_mantissa(x, bits).double(), expected, rtol=0, atol=0)
    # nearest agrees with chapter 7's round_to_format except on exact ties (none in random data)
    acc = FloatFormat("acc10", 8, 10, None)
    torch.testing.assert_close(fp8.round_mantissa(x, 10, "nearest"), round_to_format(x, acc), rtol=0, atol=0)


def test_limited_accumulator_loses_percent_and_promotion_fixes_it():
    K, D = 4096, 256
    a = fp8.quantize(randn(D, K, seed=11), "e4m3", "row").data.float()  # the codes a tensor core multiplies
    b = fp8.quantize(randn(D, K, seed=12), "e4m3", "row").data.float()
    exact = fp8.exact_dot(a, b)[0]
    dot_error = lambda s: float((s[0].double() - exact).norm() / exact.norm())  # noqa: E731
    assert dot_error(fp8.limited_dot(a, b, mantissa_bits=23)) < 1e-5  # FP32 accumulation: fine
    lossy = dot_error(fp8.limited_dot(a, b, mantissa_bits=14))
    promoted = dot_error(fp8.limited_dot(a, b, mantissa_bits=14, promote_every=128))
    assert lossy > 5e-3  # about a percent lost at K = 4096
    assert promoted < 5e-4 and promoted < lossy / 10
    # the running results at several K come from one pass
    at = [128, 1024, 4096]
    runs = fp8.limited_dot(a, b, mantissa_bits=14, at=at)
    assert runs.shape == (3, D) and torch.equal(runs[2], fp8.limited_dot(a, b, mantissa_bits=14)[0])


# --- GEMMs and Float8Linear -------------------------------------------------------------------------


def test_scaled_mm_runs_on_this_cpu():
    support = fp8.scaled_mm_support("cpu")
    assert support["tensorwise"] == "ok" and support["rowwise"] == "ok"


@pytest.mark.parametrize("granularity", ["tensor", "row"])
def test_scaled_mm_equals_the_emulated_product(granularity):
    a, b = randn(96, 200, seed=13), randn(40, 200, seed=14)
    real = fp8.fp8_gemm(a, b, granularity=granularity, emulate=False)  # the kernel, however slow here
    emulated = fp8.fp8_gemm(a, b, granularity=granularity, emulate=True)
    torch.testing.assert_close(real, emulated, rtol=1e-5, atol=1e-4)
    exact = a @ b.t()
    assert rel(real, exact) < 0.06


def test_padding_to_16_changes_nothing():
    a, b = randn(37, 50, seed=15), randn(30, 50, seed=16)  # nothing divisible by 16
    for g in ("tensor", "row"):
        torch.testing.assert_close(
            fp8.fp8_gemm(a, b, granularity=g, align=16, emulate=False),
            fp8.fp8_gemm(a, b, granularity=g, align=1, emulate=False),
            rtol=1e-6,
            atol=1e-5,
        )


def rel(a, b):
    return float((a.detach().float() - b.detach().float()).norm() / b.detach().float().norm())


@pytest.mark.parametrize("granularity", ["tensor", "row", "block"])
def test_float8_linear_forward_and_gradients_close_to_linear(granularity):
    torch.manual_seed(17)
    lin = nn.Linear(200, 72)  # not multiples of 16 or 128
    f8 = fp8.Float8Linear.from_linear(lin, granularity=granularity, emulate=None if granularity == "block" else False)
    assert f8.weight is lin.weight and f8.bias is lin.bias
    x = randn(3, 100, 200, seed=18).requires_grad_()
    gy = randn(3, 100, 72, seed=19)
    ref = lin(x)
    ref_grads = torch.autograd.grad(ref, [x, lin.weight, lin.bias], gy)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the BF16 layer
        bf = lin(x)
    bf_grads = torch.autograd.grad(bf, [x, lin.weight, lin.bias], gy.bfloat16())
    y = f8(x)
    grads = torch.autograd.grad(y, [x, f8.weight, f8.bias], gy)
    assert y.dtype == torch.float32 and grads[1].dtype == torch.float32
    # bounds: E4M3 operands lose ~2.5% (rms) each, E5M2 gradients ~5%; BF16 ~0.3%
    assert rel(y, ref) < 0.06 and rel(bf, ref) < 0.01
    assert rel(grads[0], ref_grads[0]) < 0.09 and rel(grads[1], ref_grads[1]) < 0.09
    torch.testing.assert_close(grads[2], ref_grads[2])  # the bias gradient is not an FP8 GEMM
    assert rel(bf_grads[0], ref_grads[0]) < 0.01
    assert f8.last_path.startswith("emulated" if granularity == "block" else "torch._scaled_mm")


@pytest.mark.parametrize("lead", [(0,), (2, 0), (0, 3)])
@pytest.mark.parametrize("granularity", ["tensor", "row", "block"])
def test_float8_linear_takes_an_empty_batch_like_linear(granularity, lead):
    # issue 13i: an MoE expert routinely receives zero tokens
    torch.manual_seed(23)
    lin = nn.Linear(40, 24)
    f8 = fp8.Float8Linear.from_linear(lin, granularity=granularity)
    x = torch.zeros(*lead, 40, requires_grad=True)
    ref = lin(x)
    ref_grads = torch.autograd.grad(ref.sum(), [x, lin.weight, lin.bias])
    y = f8(x)
    grads = torch.autograd.grad(y.sum(), [x, f8.weight, f8.bias])
    assert y.shape == ref.shape == (*lead, 24) and y.dtype == ref.dtype
    for g, r in zip(grads, ref_grads):
        assert g.shape == r.shape and g.dtype == r.dtype
        torch.testing.assert_close(g, r, rtol=0, atol=0)  # empty, and zeros for the weight and bias
    assert (grads[1] == 0).all() and grads[0].numel() == 0


def test_float8_linear_under_autocast_returns_bf16():
    torch.manual_seed(20)
    f8 = fp8.Float8Linear(64, 48)
    x = randn(10, 64, seed=21).requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = f8(x)
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert x.grad.dtype == torch.float32 and f8.weight.grad.dtype == torch.float32


def test_emulate_flag_uses_the_same_numbers():
    torch.manual_seed(22)
    lin = nn.Linear(128, 64)
    x = randn(32, 128, seed=23)
    real = fp8.Float8Linear.from_linear(lin, emulate=False)(x)
    emu_layer = fp8.Float8Linear.from_linear(lin, emulate=True)
    torch.testing.assert_close(emu_layer(x), real, rtol=1e-5, atol=1e-5)
    assert emu_layer.last_path.startswith("emulated")


@pytest.mark.parametrize("forced", ["0", "1"])
def test_the_fp8_speed_probe_can_be_forced(monkeypatch, forced):
    monkeypatch.setenv(fp8.SCALED_MM_ENV, forced)
    speed = fp8.fast_scaled_mm("cpu")
    assert speed.fast == {"tensor": forced == "1", "row": forced == "1"}
    assert fp8.SCALED_MM_ENV in str(speed) and speed.slowdown == fp8.probe._measured_scaled_mm("cpu").slowdown
    layer = fp8.Float8Linear(64, 32)  # emulate=None: the probe decides
    layer(randn(8, 64, seed=40))
    assert layer.last_path.startswith("torch._scaled_mm" if forced == "1" else "emulated")
    assert fp8.emulates("block", "cpu") and not fp8.emulates("tensor", "cuda")
    monkeypatch.setenv(fp8.SCALED_MM_ENV, "yes")
    with pytest.raises(ValueError, match="must be 0 .* or 1"):
        fp8.fast_scaled_mm("cpu")


def test_the_fp8_speed_probe_measures_both_kernels():
    speed = fp8.probe._measured_scaled_mm("cpu")
    assert set(speed.fast) == set(speed.slowdown) == {"tensor", "row"}
    for g in ("tensor", "row"):
        assert speed.slowdown[g] > 0 and speed.fast[g] == (speed.slowdown[g] < fp8.SCALED_MM_SLOW_FACTOR)
        assert f"{g}wise {'kernel' if speed.fast[g] else 'emulated'}" in speed.reason


def test_a_slow_kernel_is_emulated_with_the_same_numbers(monkeypatch):
    # what a CPU whose tensorwise _scaled_mm crawls gets: the emulation, and the layer says why
    slow = fp8.ScaledMMSpeed({"tensor": False, "row": True}, {"tensor": 2500.0, "row": 1.1}, "measured slow")
    monkeypatch.delenv(fp8.SCALED_MM_ENV, raising=False)
    monkeypatch.setattr(fp8.probe, "_measured_scaled_mm", lambda dev_type: slow)
    torch.manual_seed(41)
    lin = nn.Linear(96, 40)
    x = randn(24, 96, seed=42)
    auto, kernel = fp8.Float8Linear.from_linear(lin), fp8.Float8Linear.from_linear(lin, emulate=False)
    torch.testing.assert_close(auto(x), kernel(x), rtol=1e-5, atol=1e-5)
    assert (
        auto.last_path
        == "emulated: quantize-dequantize, FP32 matmul (torch._scaled_mm tensorwise is 2500x slower here)"
    )
    assert kernel.last_path.startswith("torch._scaled_mm")
    row = fp8.Float8Linear.from_linear(lin, granularity="row")
    row(x)
    assert row.last_path.startswith("torch._scaled_mm, rowwise")


def test_gpu_without_fp8_gets_a_clear_error():
    with pytest.raises(ValueError, match=r"compute capability 8.9 or newer.*A100 is sm_80.*emulate=True"):
        fp8.check_fp8_capability((8, 0), "A100")
    fp8.check_fp8_capability((8, 9), "L4")
    fp8.check_fp8_capability((9, 0), "H200")


def test_convert_to_float8_keeps_head_embeddings_and_norms():
    torch.manual_seed(24)
    cfg = GPTConfig(vocab_size=256, block_size=32, n_layer=2, n_head=4, n_embd=64)
    model = GPT(cfg)
    idx = torch.randint(0, 256, (4, 32), generator=torch.Generator().manual_seed(25))
    ref_logits, ref_loss = model(idx, idx)
    fp8.convert_to_float8(model)
    names = fp8.float8_layers(model)
    assert len(names) == 4 * cfg.n_layer and "head" not in names
    assert type(model.head) is nn.Linear and model.head.weight is model.wte.weight  # tying survives
    assert all(type(m) is not fp8.Float8Linear for m in (model.wte, model.wpe, model.ln_f))
    logits, loss = model(idx, idx)
    assert rel(logits, ref_logits) < 0.05 and abs(loss.item() - ref_loss.item()) / ref_loss.item() < 0.01
    with pytest.raises(ValueError, match="no nn.Linear left to convert"):
        fp8.convert_to_float8(nn.Sequential(nn.ReLU()))
    only_mlp = fp8.convert_to_float8(GPT(cfg), skip=lambda name, m: "mlp" not in name)
    assert all("mlp" in n for n in fp8.float8_layers(only_mlp)) and len(fp8.float8_layers(only_mlp)) == 4


def test_float8_gpt_learns():
    torch.manual_seed(26)
    cfg = GPTConfig(vocab_size=256, block_size=32, n_layer=1, n_head=2, n_embd=64)
    model = fp8.convert_to_float8(GPT(cfg), granularity="block")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    idx = torch.randint(0, 256, (8, 33), generator=torch.Generator().manual_seed(27))
    losses = []
    for _ in range(30):
        _, loss = model(idx[:, :-1], idx[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


# --- memory recipes and timing ----------------------------------------------------------------------


def test_fp8_recipes_in_the_memory_estimator():
    assert get_recipe("fp8-autocast").bytes_per_param("adamw") == 16  # FP8 compute saves no parameter bytes
    assert get_recipe("fp8-deepseek-v3").bytes_per_param("adamw") == 1 + 4 + 4 + 2 * 2
    psi = 1e9
    assert estimate(psi, precision="fp8-deepseek-v3", optimizer="adamw").total == 13 * psi


def test_gemm_timing_helpers_on_cpu():
    assert fp8.gemm_tflops("bf16", 64, 64, 64, repeats=1) > 0
    assert fp8.gemm_tflops("fp8-tensor", 64, 64, 64, repeats=1) > 0
    with pytest.raises(ValueError, match="unknown GEMM kind"):
        fp8.gemm_operands("fp4", 16, 16, 16, torch.device("cpu"))


@pytest.mark.gpu
def test_float8_linear_on_fp8_tensor_cores():
    dev = torch.device("cuda")
    if torch.cuda.get_device_capability(dev) < (8, 9):
        pytest.skip("no FP8 tensor cores")
    assert fp8.scaled_mm_support(dev)["tensorwise"] == "ok"
    torch.manual_seed(28)
    lin = nn.Linear(200, 72).to(dev)  # padded to multiples of 16 inside
    x = torch.randn(300, 200, device=dev)
    for g in ("tensor", "row"):
        real = fp8.Float8Linear.from_linear(lin, granularity=g)
        emulated = fp8.Float8Linear.from_linear(lin, granularity=g, emulate=True)
        torch.testing.assert_close(real(x), emulated(x), rtol=0.02, atol=0.02)  # BF16 output on CUDA
        assert real.last_path.startswith("torch._scaled_mm")


def test_linear_operands_of_a_training_step():
    torch.manual_seed(29)
    cfg = GPTConfig(vocab_size=256, block_size=16, n_layer=1, n_head=2, n_embd=32)
    model = GPT(cfg)
    idx = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(30))
    ops = fp8.linear_operands(model, idx, idx)
    names = ["blocks.0.attn.qkv", "blocks.0.attn.proj", "blocks.0.mlp.fc", "blocks.0.mlp.proj"]
    assert all(sorted(ops[k]) == sorted(names) for k in ops)
    fc = model.blocks[0].mlp.fc
    assert ops["activations"]["blocks.0.mlp.fc"].shape == (32, 32) and ops["gradients"]["blocks.0.mlp.fc"].shape == (
        32,
        128,
    )
    # the weight gradient is exactly dY^T X: the captured operands are the GEMM's
    _, loss = model(idx, idx)
    gw = torch.autograd.grad(loss, fc.weight)[0]
    torch.testing.assert_close(ops["gradients"]["blocks.0.mlp.fc"].t() @ ops["activations"]["blocks.0.mlp.fc"], gw)
    assert all(p.grad is None for p in model.parameters())  # left as it was


@pytest.mark.parametrize("granularity", ["tensor", "row"])
def test_chapter_10_training_takes_the_emulation_where_the_kernel_is_slow(monkeypatch, granularity):
    # chapter 10 trains a GPT after convert_to_float8; with the probe forced to "slow" (what an AMX Xeon
    # measures for tensorwise scales) the run must use the emulation, and learn what the kernel run learns
    from gputrain.train import TrainConfig, build_data, train

    cfg = TrainConfig(
        **SMALL_GPT,
        max_steps=4,
        warmup_steps=1,
        corpus_bytes=20_000,
        eval_interval=0,
        spike_window=0,
        progress=False,
    )
    train_data, val_data = build_data(cfg)
    runs = {}
    for forced in ("0", "1"):
        monkeypatch.setenv(fp8.SCALED_MM_ENV, forced)
        torch.manual_seed(cfg.seed)
        model = fp8.convert_to_float8(GPT(cfg.model_config()), granularity=granularity)
        runs[forced] = train(cfg, model=model, train_data=train_data, val_data=val_data)
        paths = {m.last_path.split(":")[0].split(",")[0] for m in model.modules() if isinstance(m, fp8.Float8Linear)}
        assert paths == {"emulated" if forced == "0" else "torch._scaled_mm"}, paths
    # the same FP8 numbers, summed in another order (which may flip a rare FP8 rounding of the next
    # operand): the losses agree far inside FP8's own few-percent error
    torch.testing.assert_close(torch.tensor(runs["0"].losses), torch.tensor(runs["1"].losses), rtol=1e-4, atol=0)

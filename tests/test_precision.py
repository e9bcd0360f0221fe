"""gputrain.precision against torch: formats, rounding, loss scaling, master weights (chapter 7)."""

import copy
import re

import pytest
import torch

from gputrain.precision import (
    FORMATS,
    DynamicLossScaler,
    EmulatedBf16,
    MasterWeights,
    bf16_values,
    bit_fields,
    get_format,
    round_to_format,
)

DTYPE_FORMATS = [name for name, f in FORMATS.items() if f.dtype is not None]


@pytest.mark.parametrize("name", DTYPE_FORMATS)
def test_format_constants_match_torch_finfo(name):
    f = get_format(name)
    info = torch.finfo(f.dtype)
    assert f.bits == info.bits
    assert f.max == info.max
    assert f.smallest_normal == info.smallest_normal == info.tiny
    assert f.eps == info.eps
    # the smallest subnormal is representable, and half of it rounds to zero (ties to even)
    sub = torch.tensor([f.smallest_subnormal, f.smallest_subnormal / 2], dtype=torch.float64).to(f.dtype)
    assert sub[0].item() == f.smallest_subnormal and sub[1].item() == 0.0


def test_published_constants():
    assert get_format("fp16").max == 65504
    assert get_format("fp8_e4m3").max == 448 and get_format("fp8_e5m2").max == 57344
    assert get_format("bf16").max_exponent == get_format("fp32").max_exponent == 127  # same range


def test_tf32_constants_by_rounding_fp32_to_10_mantissa_bits():
    tf32 = get_format("tf32")
    r = lambda v: round_to_format(torch.tensor([v], dtype=torch.float32), tf32).item()  # noqa: E731
    assert r(1 + 2**-10) == 1 + 2**-10 == 1 + tf32.eps  # one mantissa step above 1 survives
    assert r(1 + 2**-11) == 1.0 and r(1 + 3 * 2**-11) == 1 + 2**-9  # half steps: ties to even
    assert r(tf32.max) == tf32.max and r(torch.finfo(torch.float32).max) == float("inf")
    assert tf32.max == (2 - 2**-10) * 2.0**127
    assert r(tf32.smallest_normal) == tf32.smallest_normal == torch.finfo(torch.float32).tiny
    assert r(tf32.smallest_subnormal) == tf32.smallest_subnormal and r(tf32.smallest_subnormal * 0.5) == 0.0


@pytest.mark.parametrize("name", DTYPE_FORMATS)
def test_round_to_format_equals_torch_cast(name):
    f = get_format(name)
    g = torch.Generator().manual_seed(0)
    # magnitudes spread over the whole range, plus exact ties and the edges
    exps = torch.randint(-f.bias - f.mantissa_bits - 3, f.max_exponent + 2, (20_000,), generator=g)
    x = torch.randn(20_000, generator=g, dtype=torch.float64) * torch.pow(2.0, exps.double())
    if f.bits < 32:
        ties = (torch.arange(1, 200, dtype=torch.float64) + 0.5) * f.smallest_subnormal
        x = torch.cat([x, ties, -ties, torch.tensor([f.max, -f.max, 0.0, float("inf"), float("-inf")])])
    x = x.float()  # values as they arrive: FP32 tensors
    expected = x.to(f.dtype).float()
    torch.testing.assert_close(round_to_format(x, f), expected, rtol=0, atol=0, equal_nan=True)


def test_round_to_format_matches_bf16_on_random_bit_patterns():
    g = torch.Generator().manual_seed(1)
    bits = torch.randint(-(2**31), 2**31 - 1, (50_000,), generator=g, dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32)
    torch.testing.assert_close(round_to_format(x, "bf16"), x.to(torch.bfloat16).float(), rtol=0, atol=0, equal_nan=True)


def test_bit_fields():
    assert bit_fields(1.0, "fp32") == ("0", "01111111", "0" * 23)
    assert bit_fields(-2.0, "bf16") == ("1", "10000000", "0000000")
    assert bit_fields(65504.0, "fp16") == ("0", "11110", "1" * 10)
    assert bit_fields(448.0, "e4m3") == ("0", "1111", "110")
    assert bit_fields(1 + 2**-10, "tf32") == ("0", "01111111", "0000000001")


def test_unknown_format_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown float format 'fp12'; use one of: fp32, tf32"):
        get_format("fp12")
    with pytest.raises(ValueError, match="unknown float format"):
        round_to_format(torch.ones(2), "int8")


def _grad_sequence():
    """Per-step gradient multipliers: finite, overflowing (inf), and NaN steps."""
    return [
        1.0,
        1.0,
        float("inf"),
        1.0,
        1.0,
        1.0,
        1.0,
        float("nan"),
        1.0,
        1.0,
        1.0,
        1.0,
        float("inf"),
        float("inf"),
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
    ]


def test_dynamic_loss_scaler_matches_grad_scaler():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    ours_model, ref_model = copy.deepcopy(model), copy.deepcopy(model)
    ours_opt = torch.optim.SGD(ours_model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(ref_model.parameters(), lr=0.1, momentum=0.9)
    kwargs = dict(init_scale=2.0**10, growth_factor=2.0, backoff_factor=0.5, growth_interval=3)
    ours = DynamicLossScaler(**kwargs)
    ref = torch.amp.GradScaler("cpu", **kwargs)
    for step, poison in enumerate(_grad_sequence()):
        x = torch.randn(16, 8)
        for m, opt, scaler in ((ours_model, ours_opt, ours), (ref_model, ref_opt, ref)):
            opt.zero_grad()
            loss = m(x).pow(2).mean()
            scaler.scale(loss).backward()
            m.weight.grad[0, 0] *= poison  # inf or NaN in one element poisons the step
            scaler.step(opt)
            scaler.update()
        assert ours.get_scale() == ref.get_scale(), step
        for p, q in zip(ours_model.parameters(), ref_model.parameters()):
            torch.testing.assert_close(p, q, msg=f"step {step}")
    assert ours.skipped_steps == 4
    assert ours.get_scale() == 2.0**10 * 0.5**4 * 2**3  # 4 backoffs, 3 growths (two 3-step clean runs + one)


def test_loss_scaling_recovers_underflowing_fp16_gradients():
    torch.manual_seed(0)
    w = torch.randn(256, dtype=torch.float16, requires_grad=True)
    loss = (w.float() * 1e-8).sum()  # gradients of 1e-8: below FP16's smallest subnormal (6e-8)
    loss.backward()
    assert (w.grad == 0).all()
    w.grad = None
    scaler = DynamicLossScaler()
    scaler.scale((w.float() * 1e-8).sum()).backward()
    assert (w.grad != 0).all()
    torch.testing.assert_close(w.grad.float() / scaler.get_scale(), torch.full((256,), 1e-8), rtol=1e-3, atol=0)


def test_loss_scaler_errors():
    with pytest.raises(ValueError, match="growth_interval"):
        DynamicLossScaler(growth_interval=0)
    scaler = DynamicLossScaler()
    with pytest.raises(RuntimeError, match="step"):
        scaler.update()


def test_master_weights_keep_updates_that_bf16_eats():
    w = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    pure = torch.optim.SGD([w], lr=1e-3)
    w.grad = torch.ones(4, dtype=torch.bfloat16)
    pure.step()
    assert (w == 1).all()  # 1 - 1e-3 rounds back to 1 in bf16 (spacing there is 2^-7)

    v = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    master = MasterWeights([v], lambda ps: torch.optim.SGD(ps, lr=1e-3))
    for _ in range(10):
        v.grad = torch.ones(4, dtype=torch.bfloat16)
        master.step()
    torch.testing.assert_close(master.master_params[0], torch.full((4,), 0.99), rtol=0, atol=1e-6)
    assert (v < 1).all()  # ten small steps added up to one bf16 step


@pytest.mark.parametrize("growth_factor", [2.0, 1.5])
def test_loss_scale_never_grows_to_inf(growth_factor):
    # issue 13e: the grown scale must be finite *in FP32*, where GradScaler keeps it; 2^128 is finite in FP64
    p_ours, p_ref = torch.nn.Parameter(torch.ones(4)), torch.nn.Parameter(torch.ones(4))
    kwargs = dict(init_scale=2.0**126, growth_factor=growth_factor, backoff_factor=0.5, growth_interval=1)
    ours, ref = DynamicLossScaler(**kwargs), torch.amp.GradScaler("cpu", **kwargs)
    scales = {"ours": [], "GradScaler": []}
    poison = [1.0] * 5 + [float("inf")] + [1.0] * 4  # finite steps, one overflow, finite again
    for bad in poison:
        for p, scaler, name in ((p_ours, ours, "ours"), (p_ref, ref, "GradScaler")):
            opt = torch.optim.SGD([p], lr=0.0)
            opt.zero_grad()
            scaler.scale((p * 1e-30).sum() * bad).backward()  # gradients 1e-30 * scale: finite up to FP32's max
            scaler.step(opt)
            scaler.update()
            scales[name].append(scaler.get_scale())
    assert scales["ours"] == scales["GradScaler"], scales
    assert all(torch.isfinite(torch.tensor(s, dtype=torch.float32)) for s in scales["ours"]), scales
    assert max(scales["ours"]) > 2.0**126  # it did grow up to the top of FP32's range
    assert scales["ours"][5] == scales["ours"][4] * 0.5  # and backs off from there after the overflow


def test_loss_scale_init_must_fit_fp32():
    with pytest.raises(ValueError, match="init_scale"):
        DynamicLossScaler(init_scale=1e39)  # inf as an FP32 scale


@pytest.mark.parametrize("name", list(FORMATS))
def test_signed_zeros_keep_their_sign(name):
    # issue 13g: -0.0, and negatives too small for the format, round to -0.0 as torch's casts do
    f = get_format(name)
    tiny = f.smallest_subnormal
    x64 = torch.tensor([-0.0, 0.0, -tiny / 4, tiny / 4, -tiny / 2, -tiny, -1.0, 1.0], dtype=torch.float64)
    for x in (x64, x64.float()):  # FP64 inputs keep FP32's tiny negatives nonzero until rounded
        got = round_to_format(x, f)
        if f.dtype is not None:
            expected = x.to(f.dtype).to(x.dtype)
            assert torch.equal(got.signbit(), expected.signbit()), (got.tolist(), expected.tolist())
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
        assert got[:3].eq(0).all() and got.signbit().tolist() == x.signbit().tolist()
    sign, exponent, mantissa = bit_fields(-0.0, f)
    assert (sign, set(exponent), set(mantissa)) == ("1", {"0"}, {"0"})
    assert bit_fields(0.0, f)[0] == "0"


# --- bf16 emulated in FP32 (chapters 7 and 10: CPUs without native bf16) ---------------------------


def _ulp_gap(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """Largest difference in bf16 rounding steps of ``b``, and the share of entries that differ at all."""
    a, b = a.detach().float(), b.detach().float()
    step = torch.pow(2.0, torch.frexp(b)[1].float() - 8)  # spacing of bf16 values around b
    return ((a - b).abs() / step).max().item(), (a != b).float().mean().item()


def test_emulated_bf16_products_are_autocasts_numbers():
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 48)
    x = torch.randn(32, 64, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        real = lin(x)  # bf16
    real.float().square().sum().backward()
    real_grads = [t.grad.clone() for t in (x, lin.weight, lin.bias)]
    x.grad = None
    lin.zero_grad()
    with EmulatedBf16() as emu:
        emulated = lin(x)  # FP32 tensor holding bf16 values
        emulated.square().sum().backward()
        assert emu.is_bf16(emulated) and not emu.is_bf16(x)
    assert emulated.dtype == torch.float32 and torch.equal(bf16_values(emulated), emulated)
    # a product of bf16 operands, added in FP32 and rounded once: at most one rounding step apart
    for mine, theirs in [(emulated, real)] + list(zip([x.grad, lin.weight.grad, lin.bias.grad], real_grads)):
        steps, share = _ulp_gap(mine, theirs)
        assert steps <= 1 and share <= 0.01, (steps, share)


def test_emulated_bf16_gpt_step_is_close_to_autocast_and_its_loss_stays_fp32():
    from gputrain.model import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_embd=64))
    twin = copy.deepcopy(model)
    idx = torch.randint(0, 64, (4, 33))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, loss = model(idx[:, :-1], idx[:, 1:])
    loss.backward()
    with EmulatedBf16() as emu:
        logits, emulated = twin(idx[:, :-1], idx[:, 1:])
        emulated.backward()
    assert emu.is_bf16(logits) and not emu.is_bf16(emulated)  # bf16 logits, FP32 cross-entropy
    assert abs(emulated.item() / loss.item() - 1) < 1e-4  # attention rounds inside its fused kernel: not bit-equal
    for a, b in zip(twin.parameters(), model.parameters()):
        assert (a.grad - b.grad).norm() <= 0.05 * b.grad.norm()
    assert all(p.grad is not None and not emu.is_bf16(p) for p in twin.parameters())  # FP32 master weights


def test_held_bf16_weights_train_like_a_bf16_model_and_eat_small_updates():
    from gputrain.model import GPT, GPTConfig

    torch.manual_seed(1)
    model = GPT(GPTConfig(vocab_size=64, block_size=16, n_layer=1, n_head=2, n_embd=32))
    real, emulated = copy.deepcopy(model).to(torch.bfloat16), copy.deepcopy(model)
    emu = EmulatedBf16(autocast=False)
    emu.hold(emulated.parameters())
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (real, emulated)]
    idx = torch.randint(0, 64, (4, 17))
    for _ in range(3):
        _, loss = real(idx[:, :-1], idx[:, 1:])
        loss.backward()
        opts[0].step()
        with emu:
            _, loss_e = emulated(idx[:, :-1], idx[:, 1:])
            loss_e.backward()
            opts[1].step()
        assert abs(loss_e.item() / loss.item() - 1) < 1e-3
    assert all(torch.equal(bf16_values(p), p) for p in emulated.parameters())  # still bf16 values
    same = sum((a.float() == b).sum().item() for a, b in zip(real.parameters(), emulated.parameters()))
    assert same > 0.5 * sum(p.numel() for p in model.parameters())
    one = torch.ones(4)
    emu.hold([one])
    with emu:
        one.sub_(1e-3)  # a bf16 weight of 1.0 cannot take a step of 1e-3: it rounds back
        outside = torch.ones(4) - 1e-3
    assert torch.equal(one, torch.ones(4)) and outside[0].item() != 1.0
    with pytest.raises(ValueError, match="float32 tensors"):
        emu.hold([torch.ones(2, dtype=torch.float64)])


def test_bf16_on_a_cpu_without_it_warns_once_and_info_says_so(tmp_path):
    from helpers import SMALL_GPT, cli_flags, run_cli

    flags = cli_flags(**SMALL_GPT, corpus_bytes=20_000, max_steps=2, warmup_steps=0, eval_interval=0, quiet=True)
    env = {"GPUTRAIN_NATIVE_BF16": "0"}
    out = run_cli("train", *flags, "--mixed-precision", "bf16", env=env)
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("Bf16SlowWarning") == 1 and "x the fp32 time" in out.stderr
    native = run_cli("train", *flags, "--mixed-precision", "bf16", env={"GPUTRAIN_NATIVE_BF16": "1"})
    assert native.returncode == 0 and "Bf16SlowWarning" not in native.stderr
    info = run_cli("info", env=env)
    assert re.search(r"^bf16_native +False$", info.stdout, re.M) and "GPUTRAIN_NATIVE_BF16=0" in info.stdout


# --- the package's layout: one mechanism per module, imports one way ---------------------------------


def test_the_precision_package_stays_in_modules_a_reader_can_hold():
    """precision.py had grown to 400 lines and five mechanisms; each is a module drawn in the package's docstring."""
    from package_layout import check_chapter_reads, check_exports, check_layout

    check_layout("gputrain.precision")
    check_exports("gputrain.precision")
    check_chapter_reads("gputrain.precision", "07_memory_precision.ipynb", "gp")

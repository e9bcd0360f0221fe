"""gputrain.memory: activation checkpointing and the memory estimator (chapter 7)."""

import copy

import pytest
import torch
from package_layout import check_exports, check_layout

from gputrain.memory import (
    GPT3_175B,
    RECIPES,
    ModelShape,
    PrecisionRecipe,
    apply_activation_checkpointing,
    estimate,
    get_recipe,
    is_checkpointed,
    korthikanti_activations,
    measure_step,
    remove_activation_checkpointing,
)
from gputrain.model import GPT, MLP, GPTConfig


def _loss_and_grads(model, idx, targets, seed):
    torch.manual_seed(seed)  # same dropout masks in both runs
    model.zero_grad(set_to_none=True)
    logits, loss = model(idx, targets)
    loss.backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_checkpointing_gives_identical_outputs_and_gradients(dropout):
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=64, block_size=16, n_layer=3, n_head=2, n_embd=32, dropout=dropout)
    plain = GPT(cfg)
    ckpt = apply_activation_checkpointing(copy.deepcopy(plain))
    assert is_checkpointed(ckpt) and not is_checkpointed(plain)
    assert list(ckpt.state_dict()) == list(plain.state_dict())  # names unchanged
    idx, targets = torch.randint(0, 64, (2, 4, 16))
    ref_logits, ref_grads = _loss_and_grads(plain, idx, targets, seed=1)
    logits, grads = _loss_and_grads(ckpt, idx, targets, seed=1)
    torch.testing.assert_close(logits, ref_logits, rtol=0, atol=0)
    assert grads.keys() == ref_grads.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=0, atol=0, msg=name)


def _saved_tensor_count(model, idx):
    count = [0]

    def pack(t):
        count[0] += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(idx, idx)
    return count[0]


def test_checkpointing_recomputes_blocks_in_backward(monkeypatch):
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32)
    model = GPT(cfg)
    idx = torch.randint(0, 64, (2, 16))
    stored_plain = _saved_tensor_count(model, idx)
    apply_activation_checkpointing(model)
    assert _saved_tensor_count(model, idx) < stored_plain / 2  # blocks keep only their inputs
    calls = []
    gelu = torch.nn.functional.gelu
    monkeypatch.setattr(torch.nn.functional, "gelu", lambda x: calls.append(1) or gelu(x))
    _, loss = model(idx, idx)
    assert len(calls) == 2  # one forward per block
    loss.backward()
    assert len(calls) == 4  # ...and one recomputation per block
    with torch.no_grad():
        model(idx)
    assert len(calls) == 6  # a no-grad forward is not checkpointed
    remove_activation_checkpointing(model)
    assert not is_checkpointed(model) and _saved_tensor_count(model, idx) == stored_plain


def test_checkpointing_other_block_types_and_errors():
    cfg = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32)
    model = apply_activation_checkpointing(GPT(cfg), block_types=[MLP])
    assert sum(getattr(m, "_gputrain_checkpointed", False) for m in model.modules()) == 2
    apply_activation_checkpointing(model, block_types=[MLP])  # twice is harmless
    with pytest.raises(ValueError, match="block_types"):
        apply_activation_checkpointing(GPT(cfg), block_types=[torch.nn.Conv2d])
    with pytest.raises(ValueError, match="nn.Module subclasses"):
        apply_activation_checkpointing(GPT(cfg), block_types=["Block"])


# --- the estimator: published numbers ---------------------------------------------------------------

from gputrain.precision import MasterWeights  # noqa: E402


def test_gpt3_weights_in_16_bits_take_350_gb():
    assert estimate(175e9, precision="bf16-mixed").parameters == 350e9
    assert estimate(GPT3_175B, precision="fp16-mixed").parameters == 350e9


def test_mixed_precision_adam_is_16_bytes_per_parameter():
    assert get_recipe("bf16-mixed").bytes_per_param("adam") == 16  # 2 + 2 + 4 + 4 + 4
    assert get_recipe("bf16-autocast").bytes_per_param("adamw") == 16  # 4 + 4 + 0 + 4 + 4
    assert get_recipe("fp32").bytes_per_param("sgd") == 8
    e = estimate(1e9, precision="fp16-mixed", optimizer="adam")
    assert e.total == 16e9 and e.activations == 0


@pytest.mark.parametrize("stage, gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_example(stage, gb):
    # Rajbhandari et al. 2020, figure 1: Psi = 7.5B parameters, N_d = 64 GPUs, K = 12
    e = estimate(7.5e9, precision="fp16-mixed", optimizer="adam", zero_stage=stage, dp=64)
    assert round(e.total / 1e9, 1) == gb


def test_korthikanti_formula():
    s, b, h, a = 2048, 1, 12288, 96  # GPT-3 175B
    assert korthikanti_activations(s, b, h, a) == s * b * h * (34 + 5 * a * s / h)
    assert korthikanti_activations(s, b, h, a, n_layer=96, recompute="full") == 2 * s * b * h * 96
    e = estimate(GPT3_175B, batch_size=b, seq_len=s, activation_model="korthikanti")
    assert e.activations == 96 * s * b * h * (34 + 5 * a * s / h)


def test_our_gpt_matches_korthikanti_without_masks_and_attention_matrix():
    # 16-bit activations, fused attention, no dropout: 32·s·b·h + statistics per layer
    shape = ModelShape(n_layer=1, n_embd=1024, n_head=16, vocab_size=256, block_size=512)
    from gputrain.memory import gpt_layer_activations

    per_token = sum(gpt_layer_activations(shape, get_recipe("bf16-mixed")).values())
    assert per_token == 32 * 1024 + 4 * 2 + 4 * 16
    assert per_token * 512 < korthikanti_activations(512, 1, 1024, 16, recompute="selective")


def test_fp8_recipes_are_rows_of_the_table_and_own_recipes_are_instances():
    assert RECIPES["fp8-deepseek-v3"] is get_recipe("fp8-deepseek-v3")
    recipe = PrecisionRecipe("test-fp8", 1, 2, 4, 4, 1, 2, note="test only")
    assert estimate(1e9, precision=recipe).parameters == 1e9
    assert "test-fp8" not in RECIPES
    with pytest.raises(ValueError, match="PrecisionRecipe.grads must be >= 0"):
        PrecisionRecipe("bad", 1, -2, 4, 4, 1, 2)


# --- the estimator against measurement --------------------------------------------------------------


@pytest.mark.parametrize("precision", ["fp32", "bf16-autocast", "bf16-mixed"])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_estimate_matches_a_measured_training_step(precision, checkpointing):
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=256, block_size=64, n_layer=2, n_head=4, n_embd=64)
    model = GPT(cfg)
    if checkpointing:
        apply_activation_checkpointing(model)
    if precision == "bf16-mixed":
        model = model.to(torch.bfloat16)
        optimizer = MasterWeights(model.parameters(), lambda ps: torch.optim.AdamW(ps, fused=True))
    else:
        optimizer = torch.optim.AdamW(model.parameters(), fused=True)
    autocast = torch.bfloat16 if precision == "bf16-autocast" else None
    x, y = torch.randint(0, 256, (2, 8, 64))
    measure_step(model, optimizer, x, y, autocast)  # the first step creates Adam's states
    measured = measure_step(model, optimizer, x, y, autocast)
    est = estimate(model, batch_size=8, precision=precision, optimizer="adamw", activation_checkpointing=checkpointing)
    for name in ("parameters", "gradients", "master_weights", "optimizer_states"):
        assert getattr(est, name) == measured[name], name  # exactly
    assert abs(est.activations / measured["activations"] - 1) < 0.10
    assert abs(est.peak / measured["peak"] - 1) < 0.10


def test_allocation_tracker_agrees_with_torch_mem_tracker():
    from torch.distributed._tools.mem_tracker import MemTracker

    from gputrain.memory import AllocationTracker

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=128, block_size=32, n_layer=2, n_head=2, n_embd=32))
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    idx = torch.randint(0, 128, (4, 32))

    def step():
        _, loss = model(idx, idx)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    mt = MemTracker()
    mt.track_external(model, opt)
    with mt:
        step()
    with AllocationTracker() as ours:
        step()
    static = sum(p.numel() * 4 for p in model.parameters()) + sum(
        t.untyped_storage().nbytes() for s in opt.state.values() for t in s.values()
    )
    theirs = mt.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]
    assert abs((ours.peak + static) / theirs - 1) < 0.005, (ours.peak + static, theirs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(zero_stage=4), "zero_stage must be 0, 1, 2 or 3"),
        (dict(dp=0), "data-parallel degree"),
        (dict(batch_size=-1), "batch_size must be >= 0"),
        (dict(precision="fp12"), "unknown precision recipe 'fp12'"),
        (dict(optimizer="lion"), "unknown optimizer 'lion'"),
        (dict(activation_model="guess"), "activation_model"),
    ],
)
def test_bad_input_is_a_clear_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        estimate(GPT3_175B, **kwargs)


def test_bad_model_input():
    with pytest.raises(ValueError, match="params must be >= 0"):
        estimate(-5)
    with pytest.raises(ValueError, match="n_layer must be >= 1"):
        ModelShape(n_layer=0, n_embd=8, n_head=1, vocab_size=8, block_size=8)
    with pytest.raises(ValueError, match="cannot read a GPT shape"):
        estimate("gpt3")
    with pytest.raises(ValueError, match="exceeds the model's block_size"):
        estimate(GPT3_175B, seq_len=4096)
    with pytest.raises(ValueError, match="dropout"):
        estimate(GPTConfig(dropout=0.1))


def test_cli_memory_prints_the_breakdown():
    from helpers import run_cli

    out = run_cli(
        "memory", "--params", "7.5e9", "--precision", "fp16-mixed", "--zero-stage", "1", "--dp", "64", timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "31.406 GB" in out.stdout.splitlines()[-2]  # total: ZeRO's 31.4 GB
    bad = run_cli("memory", "--zero-stage", "5", timeout=120)
    assert (
        bad.returncode == 2 and bad.stderr.strip() == "gputrain memory: error: zero_stage must be 0, 1, 2 or 3, got 5"
    )


def test_fp8_recipes_exist_without_importing_fp8():
    # issue 13a: the FP8 recipes are rows of the one table, not registered by importing gputrain.fp8
    import subprocess
    import sys

    code = (
        "import sys; from gputrain.memory import RECIPES, estimate; "
        "assert 'gputrain.fp8' not in sys.modules; "
        "assert {'fp8-autocast', 'fp8-deepseek-v3'} <= set(RECIPES), sorted(RECIPES); "
        "e = estimate(1e9, precision='fp8-deepseek-v3', optimizer='adamw'); "
        "assert e.total == 13e9, e.total; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_cli_memory_accepts_the_fp8_recipes():
    from helpers import run_cli

    out = run_cli("memory", "--precision", "fp8-deepseek-v3", "--model", "gpt2-small", timeout=120)
    assert out.returncode == 0, out.stderr
    assert "fp8-deepseek-v3" in out.stdout.splitlines()[0]


def test_kv_cache_bytes_match_the_cache_tensors_and_the_cli_reports_them():
    import json

    from helpers import run_cli

    from gputrain.memory import GPT2_SMALL, kv_cache_bytes
    from gputrain.model import KVCache

    cfg = GPTConfig(vocab_size=64, block_size=24, n_layer=3, n_head=4, n_embd=32)
    for dtype in (torch.float32, torch.bfloat16):
        cache = KVCache(cfg, batch_size=2, capacity=10, dtype=dtype)
        assert kv_cache_bytes(cfg, 10, 2, torch.finfo(dtype).bits // 8) == cache.nbytes
    assert kv_cache_bytes(GPT3_175B) == 2 * 96 * 2048 * 12288 * 2  # 9.66 GB for one sequence in 16 bits
    out = run_cli("memory", "--model", "gpt2-small", "--batch-size", "4", "--json", timeout=120)
    assert out.returncode == 0, out.stderr
    gen = json.loads(out.stdout)["generation"]
    assert gen == {"kv_cache": kv_cache_bytes(GPT2_SMALL, 1024, 4, 2), "tokens": 1024}
    text = run_cli("memory", "--model", "gpt2-small", "--seq-len", "512", "--precision", "fp32", timeout=120)
    assert text.stdout.splitlines()[-1].endswith(f"KV cache (2 x layers x tokens x width x 4 bytes): "
                                                 f"{kv_cache_bytes(GPT2_SMALL, 512, 1, 4) / 1e9:,.3f} GB")  # fmt: skip


# --- the estimated peak against torch's MemTracker, depth by depth (issue 13f) ------------------------


@pytest.fixture
def one_thread():
    """Tiny models gain nothing from threads, and on a busy machine spinning threads cost seconds."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _mem_tracker_peak(precision: str, checkpointing: bool, depth: int):
    """Peak bytes of one training step by ``torch.distributed._tools.mem_tracker.MemTracker``, and the model."""
    from torch.distributed._tools.mem_tracker import MemTracker

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=64, block_size=32, n_layer=depth, n_head=2, n_embd=32))
    if checkpointing:
        apply_activation_checkpointing(model)
    if precision == "bf16-mixed":  # BF16 model, FP32 masters and Adam states
        model = model.to(torch.bfloat16)
        optimizer = MasterWeights(model.parameters(), lambda ps: torch.optim.AdamW(ps, fused=True))
        external = (optimizer.optimizer, *optimizer.master_params)
    else:  # fp32, or FP32 parameters under BF16 autocast
        optimizer = torch.optim.AdamW(model.parameters(), fused=True)
        external = (optimizer,)
    idx = torch.randint(0, 64, (2, 32))

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-autocast"):
            _, loss = model(idx, idx)  # the logits stay referenced until the step ends, as in a loop
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for p in model.parameters():  # one step on zero gradients creates Adam's states (cheaper than a real step)
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    tracker = MemTracker()
    tracker.track_external(model, *external)
    with tracker:
        step()
    return tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"], model


@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("precision", ["fp32", "bf16-autocast", "bf16-mixed"])
def test_estimated_peak_matches_mem_tracker_at_every_depth(precision, checkpointing, one_thread):
    # Under checkpointing the bottom block's backward can be the peak: the gradients of every block
    # above it exist while it is rebuilt. With 12h > tokens (here h=32, 64 tokens) it is, from depth 2.
    errors = {}
    for depth in range(1, 9):
        peak, model = _mem_tracker_peak(precision, checkpointing, depth)
        est = estimate(
            model, batch_size=2, precision=precision, optimizer="adamw", activation_checkpointing=checkpointing
        )
        errors[depth] = est.peak / peak - 1
    worst = max(errors.values(), key=abs)
    assert abs(worst) < 0.05, {d: f"{e:+.2%}" for d, e in errors.items()}


# --- the package's layout: one concern per module, imports one way ----------------------------------


def test_the_memory_package_stays_in_modules_a_reader_can_hold():
    """memory.py had grown to 895 lines and seven concerns; each concern is now a module under 300 lines,
    drawn in the package's docstring, and a module only imports the ones drawn above it."""
    check_layout("gputrain.memory")


def test_every_public_name_of_the_memory_modules_is_exported_from_the_package():
    """Readers write `from gputrain.memory import estimate`; a name a module adds must reach the package."""
    import gputrain.memory as gm

    check_exports("gputrain.memory")
    assert callable(gm.estimate) and gm.estimate.__name__ == "estimate"  # the function, not its module

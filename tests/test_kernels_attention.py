"""Chapter 11's FlashAttention kernels against torch's SDPA, with their bytes counted and a GPT trained with them.

Without CUDA the kernels run in Triton's interpreter, so shapes stay small;
sequence lengths are never multiples of the blocks, so every mask is used.
Tolerances: fp32 results must agree with SDPA to 1e-5; fp16 and bf16 inputs
are compared with SDPA in fp32 on the same (rounded) inputs, to 5e-3 and 3e-2:
about ten units in the last place of each format (2^-11 and 2^-8), room for a
GPU's kernel, which feeds the probabilities to the tensor cores in the input's
format.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from gputrain.kernels import (
    KernelInputError,
    Traffic,
    flash_attention,
    flash_backward_bytes,
    flash_forward_bytes,
    naive_attention,
    naive_attention_bytes,
)
from gputrain.kernels.launch import cdiv, one_blas_thread
from gputrain.model import GPT, GPTConfig

pytest.importorskip("triton")
DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")
TOL = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 3e-2}


def qkv(b, h, t, d, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, t, d, generator=g).to(dtype).to(DEV) for _ in range(3))


def sdpa_with_grads(q, k, v, do, causal, scale):
    """SDPA in fp32 on the same inputs: the output and dq, dk, dv."""
    q, k, v = (x.detach().float().requires_grad_() for x in (q, k, v))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    o.backward(do.float())
    return o, q.grad, k.grad, v.grad


@pytest.mark.parametrize(
    "b, h, t, d, bm, bn, causal, dtype, scale",
    [
        (1, 2, 50, 16, 32, 32, False, torch.float32, None),
        (1, 2, 50, 16, 32, 32, True, torch.float32, None),
        (1, 1, 37, 64, 16, 32, True, torch.float32, None),  # query blocks smaller than key blocks
        (2, 1, 33, 32, 16, 16, False, torch.float32, 0.3),
        (1, 1, 37, 32, 32, 16, True, torch.float16, None),  # query blocks larger than key blocks
        (1, 1, 20, 128, 16, 16, False, torch.bfloat16, None),
    ],
)
def test_output_and_gradients_equal_sdpa_and_bytes_equal_the_formulas(b, h, t, d, bm, bn, causal, dtype, scale):
    q, k, v = (x.requires_grad_() for x in qkv(b, h, t, d, dtype, seed=t + d))
    do = qkv(b, h, t, d, dtype, seed=1)[0]
    traffic = Traffic(DEV)
    o = flash_attention(q, k, v, causal=causal, scale=scale, block_m=bm, block_n=bn, traffic=traffic)
    forward = traffic.snapshot()
    o.backward(do)
    ours = (o, q.grad, k.grad, v.grad)
    assert all(x.dtype == dtype for x in ours)
    for name, got, want in zip(("out", "dq", "dk", "dv"), ours, sdpa_with_grads(q, k, v, do, causal, scale)):
        torch.testing.assert_close(got.float(), want, rtol=TOL[dtype], atol=TOL[dtype], msg=name)
    size = q.element_size()
    assert forward == flash_forward_bytes(b, h, t, d, bm, bn, size, causal)
    backward = flash_backward_bytes(b, h, t, d, bm, bn, size, causal)
    assert (traffic.read - forward.read, traffic.written - forward.written) == (backward.read, backward.written)


@pytest.mark.parametrize("causal, dtype", [(False, torch.float32), (True, torch.float16)])
def test_naive_attention_equals_sdpa_and_its_bytes_the_formula(causal, dtype):
    b, h, t, d = 1, 1, 45, 32
    q, k, v = qkv(b, h, t, d, dtype, seed=2)
    traffic = Traffic(DEV)
    out = naive_attention(q, k, v, causal=causal, traffic=traffic)
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    torch.testing.assert_close(out.float(), want, rtol=TOL[dtype], atol=TOL[dtype])
    assert traffic.snapshot() == naive_attention_bytes(b, h, t, d, q.element_size())


def counted(fn, t, d=16, **kwargs):
    traffic = Traffic(DEV)
    fn(*qkv(1, 1, t, d, seed=3), traffic=traffic, **kwargs)
    return traffic.snapshot()


def test_flash_writes_grow_as_t_naive_as_t_squared():
    """One head, fp32, D = 16, blocks of 32: double T, and see which traffic doubles and which quadruples."""
    d, size, block = 16, 4, 32
    flash = {t: counted(flash_attention, t, block_m=block, block_n=block) for t in (64, 128)}
    naive = {t: counted(naive_attention, t) for t in (64, 128)}
    assert flash[128].written == 2 * flash[64].written  # O and the log-sum-exp: T rows each
    assert naive[128].written > 3.5 * naive[64].written  # S, masked S and P: T x T each
    for t in (64, 128):  # every query block reads K and V once: O(T) bytes per program
        per_block = (flash[t].read - size * t * d) / cdiv(t, block)
        assert per_block == 2 * size * t * d
    assert naive[128].total / flash[128].total > naive[64].total / flash[64].total > 4


def test_one_query_block_reads_q_k_v_once():
    """With block_m >= T there are no K/V re-reads: the traffic is exactly linear in T."""
    t, d, size = 64, 16, 4
    assert counted(flash_attention, t, d, block_m=64, block_n=32).read == 3 * size * t * d


def test_bigger_query_blocks_divide_the_kv_rereads():
    """The T² part of flash's bytes is 2·D·itemsize per score divided by block_m; naive's does not shrink."""
    t, d, size = 4096, 64, 2
    rereads = [flash_forward_bytes(1, 1, t, d, bm, 64, size).read - size * t * d for bm in (32, 64, 128)]
    assert rereads == [2 * size * d * t * t // bm for bm in (32, 64, 128)]
    naive_floor = (4 + 4 + 2 * size) * t * t  # S written and read in fp32, masked S and P written in fp16
    assert all(naive_attention_bytes(1, 1, t, d, size, block=bk).total > naive_floor for bk in (32, 64, 128, t))


def test_causal_skips_the_blocks_above_the_diagonal():
    full, causal = (flash_forward_bytes(1, 1, 1024, 64, 64, 64, 2, c).read for c in (False, True))
    assert 0.5 < causal / full < 0.55  # about half the key blocks, plus the diagonal ones


def train_tiny_gpt(attention: str, data: torch.Tensor, steps: int = 20, t: int = 40) -> list[float]:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=64, block_size=t, n_layer=1, n_head=2, n_embd=32, attention=attention)
    model = GPT(cfg).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g, losses = torch.Generator().manual_seed(5), []
    for _ in range(steps):
        i = torch.randint(0, len(data) - t - 1, (1,), generator=g)
        x, y = (torch.stack([data[j + s : j + s + t] for j in i]).to(DEV) for s in (0, 1))
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_a_tiny_gpt_trains_the_same_with_the_triton_kernel():
    """A 1-layer GPT, 20 AdamW steps on one window of 40 tokens each: the losses match SDPA's step by step."""
    data = torch.randint(0, 64, (4096,), generator=torch.Generator().manual_seed(4))
    data = (data % 16) * (torch.arange(4096) % 4 == 0) + data // 4  # some structure, so the loss falls
    losses = {}
    with one_blas_thread():  # a model this small runs several times faster on one thread, on a busy CPU far more
        for attention in ("sdpa", "flash-triton"):
            losses[attention] = train_tiny_gpt(attention, data)
    sdpa, flash = losses["sdpa"], losses["flash-triton"]
    print("sdpa ", " ".join(f"{x:.4f}" for x in sdpa))
    print("flash", " ".join(f"{x:.4f}" for x in flash))
    assert max(abs(a - b) for a, b in zip(sdpa, flash)) < 1e-4
    assert flash[-1] < flash[0] - 0.5


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="with CUDA, Triton compiles: there is no interpreter to switch on"
)
def test_the_model_option_works_after_torch_imported_triton():
    """torch's optimizers import Triton before the model's first flash call imports the kernels (a fresh process)."""
    code = (
        "import torch; torch.set_num_threads(1)\n"
        "import triton  # what torch's first optimizer step does (through torch._dynamo), a few seconds faster\n"
        "from gputrain.model import GPT, GPTConfig\n"
        "shape = dict(block_size=20, n_layer=1, n_head=2, n_embd=32)\n"
        "torch.manual_seed(0); m = GPT(GPTConfig(**shape))\n"
        "torch.manual_seed(0); f = GPT(GPTConfig(**shape, attention='flash-triton'))\n"
        "x = torch.randint(0, 256, (1, 20))\n"
        "print((m(x, x)[1] - f(x, x)[1]).abs().item())\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}  # as in a fresh shell
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert float(run.stdout) < 1e-5


@pytest.mark.parametrize(
    "make, kwargs, words",
    [
        (lambda: qkv(1, 1, 16, 32), {}, None),  # the control: good input runs
        (lambda: (torch.randn(1, 1, 16, 64, device=DEV)[..., ::2],) * 3, {}, "not contiguous"),
        (lambda: qkv(1, 1, 16, 16, torch.float64), {}, "dtype float64"),
        (lambda: (*qkv(1, 1, 16, 16)[:2], qkv(1, 1, 16, 16, torch.float16)[2]), {}, "dtype float16"),
        (lambda: qkv(1, 1, 16, 8), {}, "head dimension 8"),
        (lambda: qkv(1, 1, 16, 48), {}, "head dimension 48"),
        (lambda: (*qkv(1, 1, 16, 16)[:2], qkv(1, 1, 17, 16)[2]), {}, "share one shape"),
        (lambda: tuple(x[0] for x in qkv(1, 1, 16, 16)), {}, "4 dimensions"),
        (lambda: qkv(1, 1, 16, 16), {"block_m": 24}, "power of two"),
        (lambda: qkv(1, 1, 16, 16), {"block_n": 8}, "at least 16"),
        (lambda: qkv(1, 1, 16, 16), {"scale": float("nan")}, "finite number"),
    ],
)
def test_bad_input_gets_one_clear_line(make, kwargs, words):
    if words is None:
        assert flash_attention(*make(), **kwargs).shape == (1, 1, 16, 32)
        return
    with pytest.raises(KernelInputError, match=words) as err:
        flash_attention(*make(), **kwargs)
    assert "\n" not in str(err.value)
    if not any(key.startswith("block") for key in kwargs):  # the naive path checks the same way
        with pytest.raises(KernelInputError, match=words):
            naive_attention(*make(), **kwargs)


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: flash_forward_bytes(1, 1, 64, 64, 0, 32), "block_m=0"),
        (lambda: flash_forward_bytes(1, 1, -5, 64, 32, 32), "t=-5"),
        (lambda: flash_backward_bytes(1, 1, 64, 64, 32, 0), "block_n=0"),
        (lambda: flash_backward_bytes(1, 1, 64, 64, 32, 32, itemsize=-2), "itemsize=-2"),
        (lambda: naive_attention_bytes(1, 1, 64, 64, block=0), "block=0"),
        (lambda: naive_attention_bytes(-1, 1, 64, 64), "b=-1"),
    ],
)
def test_byte_formulas_refuse_sizes_out_of_range(call, name):
    """A block of 0 divided by zero; a negative size gave negative bytes."""
    with pytest.raises(KernelInputError, match=f"^{name} is below"):
        call()


def test_byte_formulas_of_an_empty_sequence_are_zero():
    empty = (0, 0)
    assert tuple(vars(flash_forward_bytes(1, 1, 0, 64, 32, 32)).values()) == empty
    assert tuple(vars(flash_backward_bytes(2, 3, 0, 64, 32, 32)).values()) == empty
    assert tuple(vars(naive_attention_bytes(1, 1, 0, 64)).values()) == empty


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU tensors are right on a machine without CUDA")
def test_a_tensor_on_the_wrong_device_is_named():
    meta = torch.empty(1, 1, 16, 16, device="meta")
    with pytest.raises(KernelInputError, match="kernels run on cpu"):
        flash_attention(meta, meta, meta)


def test_the_model_option_is_checked():
    with pytest.raises(ValueError, match="attention must be one of"):
        GPTConfig(attention="flash")
    with pytest.raises(ValueError, match="no dropout"):
        GPTConfig(attention="flash-triton", dropout=0.1)


def test_the_attention_package_stays_in_modules_a_reader_can_hold():
    """attention.py had grown to 429 lines; the forward kernel, the backward kernels, the autograd function, the
    naive path and the byte formulas are now modules under 300 lines whose imports flow one way, and every name
    (the kernels chapter 11 shows included) is still importable from gputrain.kernels.attention."""
    from package_layout import check_exports, check_layout

    check_layout("gputrain.kernels.attention")
    check_exports("gputrain.kernels.attention")

"""gputrain.loss against PyTorch: cross-entropy, MSE, the chunked head loss (chapter 3)."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from gputrain import loss as L

F64 = dict(atol=1e-6, rtol=0)  # the bar: equal to PyTorch within 1e-6 in float64
REDUCTIONS = ("mean", "sum", "none")


def _logits_targets(seed, shape=(32, 11), ignore_share=0.2):
    g = torch.Generator().manual_seed(seed)
    z = 3 * torch.randn(*shape, generator=g, dtype=torch.float64)  # (N, V, d1..)
    t_shape = (shape[0],) + tuple(shape[2:])
    t = torch.randint(0, shape[1], t_shape, generator=g)
    t[torch.rand(t_shape, generator=g) < ignore_share] = -100  # padding positions
    return z, t


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1, 0.7])
@pytest.mark.parametrize("seed", [0, 1])
def test_cross_entropy_matches_torch(reduction, label_smoothing, seed):
    z, t = _logits_targets(seed)
    z.requires_grad_()
    ours = L.cross_entropy(z, t, label_smoothing=label_smoothing, reduction=reduction)
    ref = F.cross_entropy(z, t, label_smoothing=label_smoothing, reduction=reduction)
    assert_close(ours, ref, **F64)
    w = torch.randn_like(ref)  # a random upstream gradient, so 'none' is checked row by row
    assert_close(torch.autograd.grad(ours, z, w)[0], torch.autograd.grad(ref, z, w)[0], **F64)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_custom_ignore_index_and_extra_dims(reduction):
    z, t = _logits_targets(2, shape=(4, 7, 3, 5))  # (N, V, d1, d2): classes in dim 1, like images
    t[t == -100] = 3  # now class 3 is the padding class
    ours = L.cross_entropy(z, t, ignore_index=3, label_smoothing=0.2, reduction=reduction)
    ref = F.cross_entropy(z, t, ignore_index=3, label_smoothing=0.2, reduction=reduction)
    assert_close(ours, ref, **F64)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("label_smoothing", [0.0, 0.3])
def test_cross_entropy_probability_targets(reduction, label_smoothing):
    g = torch.Generator().manual_seed(3)
    z = torch.randn(6, 9, 4, generator=g, dtype=torch.float64)
    q = torch.softmax(torch.randn(6, 9, 4, generator=g, dtype=torch.float64), dim=1)
    ours = L.cross_entropy(z, q, label_smoothing=label_smoothing, reduction=reduction)
    assert_close(ours, F.cross_entropy(z, q, label_smoothing=label_smoothing, reduction=reduction), **F64)


def test_cross_entropy_unbatched():
    z, t = _logits_targets(4, ignore_share=0.0)
    for reduction in REDUCTIONS:
        assert_close(
            L.cross_entropy(z[0], t[0], reduction=reduction), F.cross_entropy(z[0], t[0], reduction=reduction), **F64
        )


def test_log_softmax_and_logsumexp_match_torch():
    z, _ = _logits_targets(5)
    assert_close(L.log_softmax(z, dim=1), torch.log_softmax(z, dim=1), **F64)
    assert_close(L.logsumexp(z, dim=0), torch.logsumexp(z, dim=0), **F64)
    row = torch.tensor([[-math.inf, -math.inf]])
    assert L.logsumexp(row).item() == -math.inf  # all -inf: -inf, not nan (like torch)


@pytest.mark.parametrize("scale", [1e2, 1e3, 1e4])
def test_stable_cross_entropy_survives_huge_logits_in_float32(scale):
    z, t = _logits_targets(6, ignore_share=0.0)
    z = (z / z.abs().max()) * scale  # logits spread over [-scale, scale]
    ours = L.cross_entropy(z.float(), t, reduction="none")
    assert torch.isfinite(ours).all()
    assert_close(ours.double(), F.cross_entropy(z, t, reduction="none"), rtol=1e-5, atol=1e-3)


def test_near_ties_among_huge_logits_stay_exact_in_float32():
    # the shift by the row maximum happens before the log: -9999 - (-9999) = 0 exactly
    z = torch.tensor([[-1e4, -1e4, -9999.0, -1e4], [1e4, -1e4, 0.0, 5e3]])
    t = torch.tensor([2, 2])
    ours = L.cross_entropy(z, t, reduction="none")
    assert_close(ours.double(), F.cross_entropy(z.double(), t, reduction="none"), rtol=1e-6, atol=1e-6)
    # hidden = identity and weight = z.T make the head's logits exactly z
    chunked = L.chunked_cross_entropy(torch.eye(2), z.T.contiguous(), t, chunk_size=1, reduction="none")
    assert_close(chunked.double(), F.cross_entropy(z.double(), t, reduction="none"), rtol=1e-6, atol=1e-6)


def test_naive_softmax_overflows_where_the_stable_one_does_not():
    z = torch.tensor([[89.0, 0.0, -1.0]])  # exp(89) > float32 max (3.4e38)
    t = torch.tensor([0])
    assert torch.isnan(L.naive_softmax(z)).any()
    assert not torch.isfinite(L.naive_cross_entropy(z, t))
    assert torch.isfinite(L.cross_entropy(z, t))
    small = torch.tensor([[88.0, 0.0, -1.0]])  # just below the threshold: both agree
    assert_close(L.naive_cross_entropy(small, t), L.cross_entropy(small, t))
    half = torch.tensor([12.0, 0.0], dtype=torch.float16)  # exp(12) = 162755 > fp16 max (65504)
    assert torch.isnan(L.naive_softmax(half)).any()
    assert torch.isfinite(L.log_softmax(half)).all()


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_mse_matches_torch(reduction):
    g = torch.Generator().manual_seed(7)
    a = torch.randn(5, 3, 2, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, 3, 2, generator=g, dtype=torch.float64)
    ours, ref = L.mse_loss(a, b, reduction), F.mse_loss(a, b, reduction=reduction)
    assert_close(ours, ref, **F64)
    w = torch.randn_like(ref)
    assert_close(torch.autograd.grad(ours, a, w)[0], torch.autograd.grad(ref, a, w)[0], **F64)


def test_perplexity_of_a_uniform_model_is_the_vocabulary():
    V = 257
    z = torch.zeros(10, V, dtype=torch.float64)  # every class equally likely
    t = torch.randint(0, V, (10,))
    assert L.perplexity(L.cross_entropy(z, t)) == pytest.approx(V, rel=1e-12)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("chunk_size", [1, 7, 64, 1000])
def test_chunked_cross_entropy_equals_naive_value_and_gradients(reduction, label_smoothing, chunk_size):
    g = torch.Generator().manual_seed(chunk_size)
    B, T, C, V = 3, 20, 8, 50
    hidden = torch.randn(B, T, C, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(V, C, generator=g, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, V, (B, T), generator=g)
    targets[1, :5] = -100
    ours = L.chunked_cross_entropy(
        hidden, weight, targets, chunk_size=chunk_size, label_smoothing=label_smoothing, reduction=reduction
    )
    ref = L.naive_head_cross_entropy(hidden, weight, targets, label_smoothing=label_smoothing, reduction=reduction)
    assert ours.shape == ref.shape
    assert_close(ours, ref, atol=1e-10, rtol=1e-10)
    up = torch.randn(ref.shape, generator=g, dtype=torch.float64)
    for a, b in zip(torch.autograd.grad(ours, (hidden, weight), up), torch.autograd.grad(ref, (hidden, weight), up)):
        assert_close(a, b, atol=1e-10, rtol=1e-10)


def test_chunked_cross_entropy_passes_gradcheck():
    g = torch.Generator().manual_seed(11)
    hidden = torch.randn(9, 4, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(6, 4, generator=g, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 6, (9,), generator=g)
    assert torch.autograd.gradcheck(
        lambda h, w: L.chunked_cross_entropy(h, w, targets, chunk_size=4, label_smoothing=0.1), (hidden, weight)
    )


def test_chunked_cross_entropy_in_bfloat16_is_close_to_naive():
    g = torch.Generator().manual_seed(12)
    hidden = torch.randn(64, 32, generator=g).bfloat16().requires_grad_()
    weight = (0.1 * torch.randn(300, 32, generator=g)).bfloat16().requires_grad_()
    targets = torch.randint(0, 300, (64,), generator=g)
    ours = L.chunked_cross_entropy(hidden, weight, targets, chunk_size=16)
    ref = L.naive_head_cross_entropy(hidden, weight, targets)
    assert ours.dtype == ref.dtype == torch.float32  # the loss is always computed in float32
    assert_close(ours, ref, atol=1e-4, rtol=1e-4)
    ga = torch.autograd.grad(ours, (hidden, weight))
    gb = torch.autograd.grad(ref, (hidden, weight))
    for a, b in zip(ga, gb):
        assert a.dtype == torch.bfloat16
        assert_close(a.float(), b.float(), atol=2e-3, rtol=2e-2)


def test_chunked_loss_uses_less_peak_memory_on_the_cpu():
    r = L.compare_head_memory(batch=2, seq=64, vocab=8192, width=32, chunk_size=16, repeats=1, dev=torch.device("cpu"))
    assert r["naive_loss"] == pytest.approx(r["chunked_loss"], rel=1e-5)
    # the naive path holds at least the logits (and more); the chunked one far less
    assert r["naive_peak_bytes"] >= r["logits_bytes_fp32"]
    assert r["chunked_peak_bytes"] < r["logits_bytes_fp32"] / 2
    assert r["saving_factor"] > 3


def test_peak_memory_counts_a_known_allocation_on_the_cpu():
    n = 1_000_000
    peak = L.peak_memory(lambda: torch.ones(n, dtype=torch.float32).sum(), torch.device("cpu"))
    assert 4 * n <= peak < 4 * n + 4096


def test_logits_bytes_at_gpt2_scale():
    assert L.logits_bytes(8, 1024, 50257) == 8 * 1024 * 50257 * 4 == 1_646_821_376
    assert L.logits_bytes(8, 1024, 50257, torch.bfloat16) == 1_646_821_376 // 2


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: L.cross_entropy(torch.zeros(2, 3), torch.tensor([0, 3])), r"outside \[0, 3\)"),
        (lambda: L.cross_entropy(torch.zeros(2, 3), torch.tensor([0, 1, 2])), "do not match"),
        (lambda: L.cross_entropy(torch.zeros(2, 3), torch.tensor([0, 1]), reduction="avg"), "reduction="),
        (lambda: L.cross_entropy(torch.zeros(2, 3), torch.tensor([0, 1]), label_smoothing=1.5), "label_smoothing"),
        (lambda: L.mse_loss(torch.zeros(3, 1), torch.zeros(3)), "differ in shape"),
        (
            lambda: L.chunked_cross_entropy(torch.zeros(2, 4), torch.zeros(5, 3), torch.zeros(2, dtype=torch.long)),
            r"weight must be \(V, C=4\)",
        ),
        (
            lambda: L.chunked_cross_entropy(torch.zeros(2, 4), torch.zeros(5, 4), torch.zeros(3, dtype=torch.long)),
            "one target per row",
        ),
        (
            lambda: L.chunked_cross_entropy(torch.zeros(2, 4), torch.zeros(5, 4), torch.tensor([0, 5])),
            r"targets must be in \[0, 5\)",
        ),
        (
            lambda: L.chunked_cross_entropy(torch.zeros(2, 4), torch.zeros(5, 4), torch.tensor([0, 1]), chunk_size=0),
            "chunk_size",
        ),
    ],
)
def test_bad_input_raises_one_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.gpu
def test_chunked_loss_saves_gpu_memory():
    r = L.compare_head_memory(
        batch=4, seq=512, vocab=50257, width=256, chunk_size=256, repeats=1, dev=torch.device("cuda")
    )
    assert r["naive_loss"] == pytest.approx(r["chunked_loss"], rel=1e-4)
    assert r["saving_factor"] > 3


# --- the package's layout: one mechanism per module, imports one way ---------------------------------


def test_the_loss_package_stays_in_modules_a_reader_can_hold():
    """loss.py had grown to 423 lines; its four mechanisms are modules drawn in the package's docstring."""
    from package_layout import check_chapter_reads, check_exports, check_layout

    check_layout("gputrain.loss")
    check_exports("gputrain.loss")
    check_chapter_reads("gputrain.loss", "03_loss.ipynb", "L")  # gt.show(L._row_max) too

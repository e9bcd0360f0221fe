"""gputrain.roofline: FLOPs and bytes by formula against independent counts, the roofs, and this CPU's agreement."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from gputrain import flops
from gputrain import roofline as rf
from gputrain.model import GPT, GPTConfig
from gputrain.parallel.ring import chunk_bounds, ring_traffic_bytes
from gputrain.speed import count_ops

GEN = torch.Generator().manual_seed(0)


def counted_flops(fn, *args) -> int:
    with FlopCounterMode(display=False) as counter:
        fn(*args)
    return counter.get_total_flops()


def nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.nbytes for t in tensors)


@pytest.mark.parametrize("m,k,n", [(7, 13, 5), (64, 128, 96), (1, 300, 2)])
def test_matmul_against_the_flop_counter_and_tensor_sizes(m, k, n):
    a, b = torch.randn(m, k, generator=GEN), torch.randn(k, n, generator=GEN)
    op = rf.matmul(m, k, n, itemsize=4)
    assert op.flops == counted_flops(torch.mm, a, b)
    assert op.bytes == nbytes(a, b, a @ b) == count_ops(torch.mm, a, b).bytes_moved
    assert op.intensity == op.flops / op.bytes
    half = rf.matmul(m, k, n, itemsize=2)
    assert half.flops == op.flops and half.bytes == op.bytes / 2


def test_matmul_intensity_grows_with_size_and_elementwise_ops_stay_low():
    sizes = [64, 256, 1024, 4096]
    intensities = [rf.matmul(s, s, s).intensity for s in sizes]
    assert intensities == sorted(intensities) and intensities[-1] / intensities[0] == pytest.approx(64)
    assert rf.matmul(4096, 4096, 4096).intensity == pytest.approx(2 * 4096 / 6)  # 2n^3 / (3 n^2 x 2 bytes)
    low = [rf.adamw_step(10**6), rf.layernorm(4096, 768), rf.gelu(10**6), rf.add(10**6), rf.softmax(4096, 1024)]
    assert all(op.intensity <= 1.5 for op in low), [(op.name, op.intensity) for op in low]
    assert rf.adamw_step(10**6).intensity == pytest.approx(0.5)  # 14 FLOPs per 28 bytes


def test_elementwise_ops_against_the_operator_byte_counter():
    rows, cols = 48, 40
    x, w, b = torch.randn(rows, cols, generator=GEN), torch.randn(cols), torch.randn(cols)
    assert rf.add(rows * cols).bytes == count_ops(torch.add, x, x).bytes_moved
    assert rf.gelu(rows * cols).bytes == count_ops(F.gelu, x).bytes_moved
    assert rf.softmax(rows, cols).bytes == count_ops(torch.softmax, x, -1).bytes_moved
    # native_layer_norm also writes each row's mean and 1/std for the backward pass: 2 floats per row
    assert rf.layernorm(rows, cols).bytes == count_ops(F.layer_norm, x, (cols,), w, b).bytes_moved - 8 * rows

    def softmax_by_hand(t):  # eager PyTorch's five passes, each through memory
        shifted = t - t.amax(dim=-1, keepdim=True)
        e = shifted.exp()
        return e / e.sum(dim=-1, keepdim=True)

    unfused = rf.softmax(rows, cols, fused=False)
    assert unfused.bytes == count_ops(softmax_by_hand, x).bytes_moved
    assert unfused.bytes / rf.softmax(rows, cols).bytes == pytest.approx(4, rel=0.1)
    counted = flops.count_flops(lambda: (torch.softmax(x, -1), F.gelu(x), F.layer_norm(x, (cols,), w, b)))
    assert counted.total == rf.softmax(rows, cols).flops + rf.gelu(rows * cols).flops + rf.layernorm(rows, cols).flops


def test_adamw_reads_every_weight_and_both_moments_and_writes_them_back():
    n = 4096
    param = torch.nn.Parameter(torch.randn(n, generator=GEN))
    param.grad = torch.randn(n, generator=GEN)
    opt = torch.optim.AdamW([param], lr=1e-3, fused=True)
    opt.step()  # creates the moments
    before = param.detach().clone()
    counted = count_ops(opt.step)
    assert not torch.equal(param.detach(), before)  # the weights were rewritten
    op = rf.adamw_step(n)
    assert op.bytes == 28 * n  # p, g, m, v read; p, m, v written
    # the fused kernel's schema lets it unscale the gradient in place, so the counter also books the
    # gradient as written; the step counters add a few bytes more
    assert 0 <= counted.bytes_moved - 4 * n - op.bytes <= 64
    assert op.flops == rf.ADAMW_FLOPS_PER_PARAM * n == 14 * n


def test_gpt_matmuls_and_attention_against_the_flop_counter_of_a_real_block():
    cfg = GPTConfig(vocab_size=96, block_size=32, n_layer=1, n_head=4, n_embd=64, bias=False)
    model = GPT(cfg)
    batch, seq = 3, 32
    idx = torch.randint(0, cfg.vocab_size, (batch, seq), generator=GEN)
    with torch.no_grad():
        counted = flops.count_flops(model, idx, elementwise=False)
    ops = rf.gpt_matmuls(cfg, batch * seq, itemsize=4)
    attention = 4 * batch * cfg.n_head * seq * seq * (cfg.n_embd // cfg.n_head)  # the two products
    assert counted.total == sum(op.flops for op in ops) + attention
    assert [op.name.split(" (")[0] for op in ops] == [
        "QKV projection",
        "attention output",
        "MLP up",
        "MLP down",
        "LM head",
    ]
    block = rf.gpt_operations(cfg, batch, itemsize=4)
    assert len(block) == 9 and block[2].name.startswith("attention, naive")
    assert rf.gpt_operations(cfg, batch, itemsize=4, block=16)[2].name.startswith("attention, tiled")


def test_naive_attention_against_the_flop_counter_and_its_tensors():
    b, h, t, d = 2, 3, 40, 8
    q, k, v = (torch.randn(b, h, t, d, generator=GEN) for _ in range(3))
    scores = q @ k.transpose(-2, -1)
    probs = torch.softmax(scores, -1)
    out = probs @ v
    op = rf.attention_naive(b, h, t, d, itemsize=4)
    # Q, K, V read and O written; scores and probabilities each written once and read once
    assert op.bytes == nbytes(q, k, v, out) + 2 * nbytes(scores, probs)
    assert op.scratch == nbytes(scores, probs)
    counted = flops.count_flops(lambda: torch.softmax(q @ k.transpose(-2, -1), -1) @ v)
    assert op.flops == counted.total


def tiled_attention_by_hand(q, k, v, block):
    """A FlashAttention forward in torch, block of queries by block of keys, counting the bytes it loads."""
    t, d = q.shape
    out, loaded = torch.empty_like(q), 0
    for i in range(0, t, block):
        qi = q[i : i + block]
        loaded += qi.nbytes
        run_max = torch.full((len(qi), 1), -math.inf)
        run_sum, acc = torch.zeros(len(qi), 1), torch.zeros(len(qi), d)
        for j in range(0, t, block):
            kj, vj = k[j : j + block], v[j : j + block]
            loaded += kj.nbytes + vj.nbytes
            s = qi @ kj.T / math.sqrt(d)
            new_max = torch.maximum(run_max, s.amax(-1, keepdim=True))
            scale, p = torch.exp(run_max - new_max), torch.exp(s - new_max)
            run_sum, acc, run_max = run_sum * scale + p.sum(-1, keepdim=True), acc * scale + p @ vj, new_max
        out[i : i + block] = acc / run_sum
        loaded += out[i : i + block].nbytes
    return out, loaded


@pytest.mark.parametrize("t,block", [(64, 16), (70, 16), (33, 64)])
def test_tiled_attention_bytes_equal_a_blockwise_forward_that_matches_sdpa(t, block):
    d = 8
    q, k, v = (torch.randn(t, d, generator=GEN, dtype=torch.float64) for _ in range(3))
    out, loaded = tiled_attention_by_hand(q, k, v, block)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q[None], k[None], v[None])[0])
    op = rf.attention_tiled(1, 1, t, d, block=block, itemsize=8)
    assert op.bytes == loaded
    assert op.flops == rf.attention_naive(1, 1, t, d).flops  # the same arithmetic, less traffic


def test_tiled_attention_keeps_t_squared_off_memory():
    b, h, d, block = 1, 12, 64, 128
    seqs = [1024, 2048, 4096, 8192]
    naive = [rf.attention_naive(b, h, t, d) for t in seqs]
    tiled = [rf.attention_tiled(b, h, t, d, block=block) for t in seqs]
    assert flops.loglog_slope(seqs, [op.scratch for op in naive]) == pytest.approx(2)
    assert flops.loglog_slope(seqs, [op.scratch for op in tiled]) == pytest.approx(1)
    # traffic: K and V are re-read once per block of queries, 2d/block elements per score against 4
    ratios = [n.bytes / t.bytes for n, t in zip(naive, tiled)]
    assert ratios == sorted(ratios) and ratios[-1] < 2 * block / d
    assert all(t.intensity > n.intensity for n, t in zip(naive, tiled))


@pytest.mark.parametrize("ranks", [2, 3, 4, 8])
def test_all_reduce_bytes_match_the_ring_of_chapter_8(ranks):
    numel = 24 * 1000 + 7  # not divisible by every rank count
    op = rf.all_reduce(numel, ranks, itemsize=4)
    assert op.bytes == pytest.approx(ring_traffic_bytes(numel, ranks, 4))
    sizes = [end - start for start, end in chunk_bounds(numel, ranks)]
    # rank 0 sends chunk (0 - s) mod N at step s of the reduce-scatter and (1 - s) mod N of the all-gather
    sent = sum(sizes[-s % ranks] + sizes[(1 - s) % ranks] for s in range(ranks - 1))
    assert op.bytes == pytest.approx(4 * sent, rel=ranks / numel)
    assert op.intensity == pytest.approx(1 / 8)  # one add per 8 bytes sent, for any N


def test_machine_roofs_ridge_and_bound():
    h100 = rf.Machine.from_gpu("H100", "bf16")
    assert h100.ridge == pytest.approx(989.4e12 / 3.35e12)
    assert h100.attainable(1.0) == pytest.approx(3.35e12)  # bandwidth-bound: one FLOP per byte
    assert h100.attainable(10_000) == h100.peak
    assert h100.attainable(h100.ridge) == pytest.approx(h100.peak)
    step = rf.adamw_step(124_000_000)
    assert h100.bound(step) == "memory"
    assert h100.predict_seconds(step) == pytest.approx(step.bytes / 3.35e12)
    big = rf.matmul(8192, 8192, 8192)
    assert h100.bound(big) == "compute" and h100.predict_seconds(big) == pytest.approx(big.flops / h100.peak)
    assert rf.Machine.from_gpu("NVIDIA H800", "fp8").peak == pytest.approx(1978.9e12)
    assert rf.Machine.from_gpu("A100", "fp32").ridge < rf.Machine.from_gpu("A100", "bf16").ridge


def test_bad_input_gets_one_clear_error():
    with pytest.raises(ValueError, match="no fp8 peak and HBM bandwidth for 'A100'"):
        rf.Machine.from_gpu("A100", "fp8")
    with pytest.raises(ValueError, match="'Intel Xeon'"):
        rf.Machine.from_gpu("Intel Xeon")
    with pytest.raises(ValueError, match="positive integers, got m=0"):
        rf.matmul(0, 4, 4)
    with pytest.raises(ValueError, match="at least 2 ranks"):
        rf.all_reduce(100, 1)
    with pytest.raises(ValueError, match="positive peak"):
        rf.Machine("x", 0.0, 1.0)


def test_measured_cpu_roofline_predicts_a_memory_bound_and_a_compute_bound_op():
    """On this CPU, one thread: measured times agree with max(FLOPs/peak, bytes/bandwidth).

    The probes and operations alternate so a busy neighbour slows both; one
    re-measurement is allowed for a burst of load that hits only part of a run.
    """
    for attempt in range(2):
        machine, rows = rf.check_cpu_roofline(rounds=7)
        by = {row.op.name.split()[0]: row for row in rows}
        if all(row.within() for row in rows):
            break
    report = {k: (round(r.ratio, 2), r.bound) for k, r in by.items()}
    assert 0.1 < machine.ridge < 1000, machine
    assert by["add"].bound == by["AdamW"].bound == "memory" and by["matmul"].bound == "compute", report
    # AdamW overwrites what it reads, so it escapes the read-before-write (write-allocate) that the copy
    # probe and the add pay on a CPU; with that read counted, all three agree within the tolerance
    assert by["AdamW"].within(), report


def test_write_allocate_adds_one_read_of_each_fresh_output_line():
    op = rf.add(1000)
    cpu = rf.on_a_cpu(op, fresh_output_bytes=4000)
    assert cpu.bytes == op.bytes + 4000 and cpu.flops == op.flops and "write-allocate" in cpu.rule


def test_a_measured_machine_has_sane_roofs():
    machine = rf.Machine.measure(rounds=3, copy_bytes=1 << 24, matmul_n=256)
    assert machine.name == "this CPU, 1 thread" and "measured" in machine.source
    assert 1e8 < machine.bandwidth < 1e12 and 1e8 < machine.peak < 1e13
    assert machine.bound(rf.adamw_step(10**7)) == "memory"


def test_the_roofline_package_stays_in_modules_a_reader_can_hold():
    """roofline.py had grown to 492 lines; its cost, operations, GPT list, machine and CPU check are now
    modules under 300 lines whose imports flow one way, and every name is still roofline.<name>."""
    from package_layout import check_exports, check_layout

    check_layout("gputrain.roofline")
    check_exports("gputrain.roofline")

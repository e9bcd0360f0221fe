"""Interleaved 1F1B, ZB-H1 and DualPipe timelines against the papers' bubbles; ZB-H1 run for real."""

from fractions import Fraction

import pytest

from gputrain.parallel import launch
from gputrain.parallel.pipeline import schedule_1f1b
from gputrain.parallel.schedules import bubble_formula, schedule_dualpipe, schedule_interleaved, schedule_zb_h1
from gputrain.parallel.zero_bubble import zb_check


def check_dependencies(t, route):
    """Every op runs once, one at a time per device, after its inputs; route(micro, stage) -> device."""
    end = {(op.kind, op.stage, op.micro): op.end for ops in t.stages for op in ops}
    for d, ops in enumerate(t.stages):
        assert all(a.end <= b.start for a, b in zip(ops, ops[1:]))
        for op in ops:
            assert route(op.micro, op.stage) == d
            if op.kind == "F" and op.stage > 0:
                assert end[("F", op.stage - 1, op.micro)] <= op.start
            if op.kind == "B":
                assert end[("F", op.stage, op.micro)] <= op.start
                assert end.get(("B", op.stage + 1, op.micro), 0) <= op.start
            if op.kind == "W":
                assert end[("B", op.stage, op.micro)] <= op.start


@pytest.mark.parametrize("v", [1, 2, 3, 4])
def test_interleaved_bubble_is_p_minus_1_over_v_m(v):
    for p in range(2, 7):
        for m in (p, 2 * p, 3 * p):
            t = schedule_interleaved(p, m, v)
            work = m * v * 3  # per device: m micro-batches x v chunks x (F=1 + B=2)
            assert all(t.bubble_time(d) == bubble_formula("interleaved", p) for d in range(p))
            assert Fraction(t.makespan - work, work) == Fraction(p - 1, v * m)
            check_dependencies(t, lambda i, k: k % p)
            # Megatron: the first device holds p(1 + (p-1)/(pv)) micro-batches' worth of activations
            assert t.peak_in_flight()[0] == min(Fraction(p) + Fraction(p - 1, v), Fraction(m * v, v))


def test_zb_h1_cuts_the_1f1b_bubble_to_a_third_and_holds_p_micro_batches():
    for p in range(2, 8):
        for m in range(p, 3 * p + 1):
            zb, one = schedule_zb_h1(p, m), schedule_1f1b(p, m, 1, 2)
            assert [zb.bubble_time(s) for s in range(p)] == [bubble_formula("ZB-H1", p)] * p == [p - 1] * p
            assert one.bubble_time(0) == bubble_formula("1F1B", p) == 3 * (p - 1)
            assert zb.peak_in_flight() == [p] * p and max(one.peak_in_flight()) == p
            check_dependencies(zb, lambda i, k: k)
    # with unequal times the paper's (p-1)(F+B-2W), B the whole backward
    t = schedule_zb_h1(4, 8, forward=2, backward=2, weight=1)
    assert t.bubble_time(0) == bubble_formula("ZB-H1", 4, F=2, B=2, W=1) == 3 * (2 + 3 - 2)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 12), (6, 12), (8, 20)])
def test_dualpipe_runs_both_directions_within_the_reported_bubble(p, m):
    t = schedule_dualpipe(p, m)
    check_dependencies(t, lambda i, k: k if i < m // 2 else p - 1 - k)
    assert t.peak_in_flight() == [p + 1] * p  # DeepSeek-V3: PP + 1 activations per device
    bubbles = [t.bubble_time(d) for d in range(p)]
    assert max(bubbles) <= bubble_formula("DualPipe", p) < bubble_formula("ZB-H1", p)


def test_bad_schedules_raise_clear_errors():
    with pytest.raises(ValueError, match="more than the 6 layers"):
        schedule_interleaved(4, 8, 2, n_layers=6)
    with pytest.raises(ValueError, match="multiple of the devices"):
        schedule_interleaved(4, 6, 2)
    with pytest.raises(ValueError, match="even number of devices"):
        schedule_dualpipe(3, 6)


@pytest.mark.multiprocess
@pytest.mark.parametrize("n", [2, 3])
def test_zb_h1_split_backward_gradients_equal_1f1b(n):
    for s, r in enumerate(launch(zb_check, n, 6, 16, 2, 12)):
        assert r["zb_vs_1f1b"] < 1e-12 and r["1f1b_vs_one_process"] < 1e-12
        assert r["peak"] == {"1F1B": n - s, "ZB-H1": n}  # as the timelines say
        assert "W" in r["order"]["ZB-H1"] and "W" not in r["order"]["1F1B"]

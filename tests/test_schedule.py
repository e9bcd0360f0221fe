"""gputrain.schedule: closed forms, PyTorch's cosine schedulers where they coincide, LambdaLR, bad input."""

from __future__ import annotations

import math

import pytest
import torch
from torch.optim.lr_scheduler import CosineAnnealingLR, CosineAnnealingWarmRestarts, LambdaLR

from gputrain import optim
from gputrain.schedule import cyclic, warmup_constant, warmup_cosine

BASE_LR = 0.1


def lrs_from(make_scheduler, steps: int) -> list[float]:
    """The learning rate each of ``steps`` optimizer steps actually used under a torch scheduler."""
    w = torch.zeros(1, requires_grad=True)
    opt = optim.SGD([w], lr=BASE_LR)
    sched = make_scheduler(opt)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        w.grad = torch.zeros(1)
        opt.step()
        sched.step()
    return out


def test_warmup_cosine_closed_form():
    total, warmup, floor = 100, 10, 0.1
    f = warmup_cosine(total, warmup, floor)
    for k in range(warmup):
        assert f(k) == pytest.approx((k + 1) / warmup, abs=1e-12)
    for k in range(warmup, 130):
        p = min(1.0, (k - warmup) / (total - warmup))
        assert f(k) == pytest.approx(floor + (1 - floor) * (1 + math.cos(math.pi * p)) / 2, abs=1e-12)
    assert f(warmup - 1) == 1.0 and f(warmup) == 1.0  # the peak, held for the first decay step
    assert f(warmup + 45) == pytest.approx(floor + (1 - floor) / 2)  # half way down: the midpoint
    assert f(total) == pytest.approx(floor) and f(10 * total) == pytest.approx(floor)
    values = [f(k) for k in range(warmup, total + 1)]
    assert all(a >= b for a, b in zip(values, values[1:]))  # decay never climbs


def test_warmup_cosine_without_warmup_equals_cosine_annealing_lr():
    total, floor = 60, 0.05
    ours = lrs_from(lambda o: LambdaLR(o, warmup_cosine(total, 0, floor)), total + 1)
    theirs = lrs_from(lambda o: CosineAnnealingLR(o, T_max=total, eta_min=floor * BASE_LR), total + 1)
    assert ours == pytest.approx(theirs, abs=1e-12)


def test_warmup_equal_to_total_has_no_decay():
    f = warmup_cosine(5, 5, min_ratio=0.1)
    assert [f(k) for k in range(7)] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0, 0.1, 0.1])


def test_warmup_constant_closed_form():
    f = warmup_constant(4)
    assert [f(k) for k in range(7)] == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 1.0])
    assert warmup_constant(0)(0) == 1.0


@pytest.mark.parametrize("t0,mult", [(10, 1), (5, 2), (4, 3)])
def test_cyclic_equals_cosine_annealing_warm_restarts(t0, mult):
    floor, steps = 0.1, 100
    ours = lrs_from(lambda o: LambdaLR(o, cyclic(t0, floor, cycle_mult=mult)), steps)
    theirs = lrs_from(lambda o: CosineAnnealingWarmRestarts(o, T_0=t0, T_mult=mult, eta_min=floor * BASE_LR), steps)
    assert ours == pytest.approx(theirs, abs=1e-12)


def test_cyclic_closed_form_restarts_and_warmup():
    f = cyclic(10, 0.0, cycle_mult=2, warmup_steps=3)
    assert [f(k) for k in range(3)] == pytest.approx([1 / 3, 2 / 3, 1.0])
    starts = [3, 13, 33, 73]  # warmup, then cycles of 10, 20, 40
    for s, length in zip(starts, [10, 20, 40]):
        assert f(s) == 1.0  # a restart: back to the full rate
        assert f(s + length // 2) == pytest.approx(0.5)
        assert f(s + length - 1) == pytest.approx((1 + math.cos(math.pi * (length - 1) / length)) / 2)
    assert cyclic(7)(7 * 1000 + 3) == pytest.approx(cyclic(7)(3))  # equal cycles repeat exactly


def test_lambda_lr_applies_the_multiplier():
    f = warmup_cosine(50, 5, 0.1)
    used = lrs_from(lambda o: LambdaLR(o, f), 50)
    assert used == pytest.approx([BASE_LR * f(k) for k in range(50)], abs=1e-15)


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: warmup_cosine(100, 150), "warmup_steps=150 exceeds total_steps=100"),
        (lambda: warmup_constant(20, total_steps=10), "warmup_steps=20 exceeds total_steps=10"),
        (lambda: warmup_cosine(0), "total_steps=0 must be >= 1"),
        (lambda: warmup_cosine(100, -1), "warmup_steps=-1 must be >= 0"),
        (lambda: warmup_cosine(100, 10, min_ratio=1.5), r"min_ratio=1.5 must be in \[0, 1\]"),
        (lambda: warmup_constant(-2), "warmup_steps=-2 must be >= 0"),
        (lambda: cyclic(0), "total_steps=0 must be >= 1"),
        (lambda: cyclic(10, cycle_mult=0), "cycle_mult=0 must be a whole number"),
        (lambda: cyclic(10, cycle_mult=1.5), "cycle_mult=1.5 must be a whole number"),
        (lambda: warmup_cosine(10)(-1), "step=-1 must be >= 0"),
    ],
)
def test_bad_input_raises_one_clear_error(make, match):
    with pytest.raises(ValueError, match=match) as info:
        make()
    assert "\n" not in str(info.value)

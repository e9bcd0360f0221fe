"""Pipeline schedules (bubble, in-flight micro-batches) and a real torch.distributed.pipelining run."""

from fractions import Fraction

import pytest

from gputrain.parallel import launch
from gputrain.parallel.pipeline import bubble_fraction, pipeline_check, schedule_1f1b, schedule_gpipe, split_layers

GRID = [(p, m) for p in range(1, 7) for m in range(1, 11)]


@pytest.mark.parametrize("schedule", [schedule_gpipe, schedule_1f1b])
@pytest.mark.parametrize("backward", [1, 2])
def test_bubble_is_p_minus_1_over_m_plus_p_minus_1(schedule, backward):
    for p, m in GRID:
        t = schedule(p, m, backward=backward)
        assert t.bubble() == Fraction(p - 1, m + p - 1) == bubble_fraction(p, m), (p, m)
        assert t.makespan == (1 + backward) * (m + p - 1)


@pytest.mark.parametrize("schedule", [schedule_gpipe, schedule_1f1b])
def test_schedules_respect_dependencies_and_run_one_op_at_a_time(schedule):
    for p, m in GRID:
        t = schedule(p, m)
        end = {(op.kind, s, op.micro): op.end for s, ops in enumerate(t.stages) for op in ops}
        for s, ops in enumerate(t.stages):
            assert sorted((op.kind, op.micro) for op in ops) == sorted((k, i) for k in "FB" for i in range(m))
            assert all(a.end <= b.start for a, b in zip(ops, ops[1:]))  # one at a time, in order
            for op in ops:
                if op.kind == "F" and s > 0:
                    assert end[("F", s - 1, op.micro)] <= op.start
                if op.kind == "B":
                    assert end[("F", s, op.micro)] <= op.start
                    if s < p - 1:
                        assert end[("B", s + 1, op.micro)] <= op.start


def test_1f1b_holds_at_most_p_micro_batches_gpipe_holds_all_m():
    for p, m in GRID:
        assert schedule_gpipe(p, m).peak_in_flight() == [m] * p
        peaks = schedule_1f1b(p, m).peak_in_flight()
        assert peaks == [min(p - s, m) for s in range(p)] and max(peaks) <= p


def test_bad_pipeline_shapes_raise_clear_errors():
    assert split_layers(10, 4) == [range(0, 3), range(3, 6), range(6, 8), range(8, 10)]
    with pytest.raises(ValueError, match="cannot split 4 layers into 5 pipeline stages"):
        split_layers(4, 5)
    with pytest.raises(ValueError, match="at least one stage and one micro-batch"):
        schedule_1f1b(0, 4)


@pytest.mark.multiprocess
@pytest.mark.parametrize("schedule", ["1F1B", "GPipe"])
def test_two_stage_pipeline_gradients_equal_one_process(schedule):
    results = launch(pipeline_check, 2, 4, 32, 8, 16, 4, schedule)
    assert [r["layers"] for r in results] == [[0, 1], [2, 3]]
    for r in results:
        assert r["max_grad_diff"] < 1e-5
    assert results[1]["pipe_loss"] == pytest.approx(results[1]["ref_loss"], rel=1e-5)

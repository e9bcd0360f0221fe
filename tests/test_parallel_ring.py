"""Ring all-reduce from scratch against dist.all_reduce, and its traffic 2(N-1)/N * K."""

import pytest
import torch
import torch.distributed as dist

from gputrain.parallel import LaunchError, launch
from gputrain.parallel.ring import (
    chunk_bounds,
    parameter_server_traffic_bytes,
    ring_all_reduce,
    ring_all_reduce_time,
    ring_traffic_bytes,
    traffic_survey,
)


def ring_on_awkward_tensors(seed: int) -> int:
    """Shapes, layouts and dtypes the ring must handle, each checked against dist.all_reduce."""
    n, rank = dist.get_world_size(), dist.get_rank()
    g = torch.Generator().manual_seed(seed + rank)
    cases = [
        torch.randn(n, generator=g),  # exactly one element per chunk
        torch.randn(3, 7, generator=g),  # 2-D, odd length 21
        torch.randn(5, 6, generator=g).t(),  # not contiguous
        torch.randn(13, generator=g, dtype=torch.float64),
        torch.randint(-100, 100, (11,), generator=g),
    ]  # integers: exact
    for x in cases:
        expected, mine = x.clone(), x.clone()
        dist.all_reduce(expected)
        ring_all_reduce(mine)
        torch.testing.assert_close(mine, expected)
    return len(cases)


def ring_on_too_short_tensor() -> None:
    ring_all_reduce(torch.ones(dist.get_world_size() - 1))


def test_chunks_cover_the_tensor_and_differ_by_at_most_one():
    for numel in (4, 5, 7, 100, 1001):
        for n in range(1, 5):
            bounds = chunk_bounds(numel, n)
            sizes = [e - s for s, e in bounds]
            assert bounds[0][0] == 0 and bounds[-1][1] == numel and sum(sizes) == numel
            assert all(bounds[i][1] == bounds[i + 1][0] for i in range(n - 1))
            assert max(sizes) - min(sizes) <= 1


def test_bad_world_sizes_raise_clear_errors():
    with pytest.raises(ValueError, match="world size must be >= 1"):
        chunk_bounds(10, 0)
    with pytest.raises(ValueError, match="cannot be cut into 4 ring chunks"):
        chunk_bounds(3, 4)
    with pytest.raises(ValueError, match="world size must be >= 1"):
        ring_traffic_bytes(10, 0, 4)


def test_traffic_and_time_formulas():
    assert ring_traffic_bytes(1000, 4, 2) == pytest.approx(2 * 3 / 4 * 2000)
    assert ring_traffic_bytes(1000, 1, 4) == 0
    assert parameter_server_traffic_bytes(1000, 8, 4) == 7 * 4000
    # 2(N-1)/N * K / B: 14 GB over 8 ranks at 50 GB/s
    assert ring_all_reduce_time(14e9, 8, 50e9) == pytest.approx(2 * 7 / 8 * 14e9 / 50e9)
    assert ring_all_reduce_time(1e6, 4, 1e9, latency=1e-5) == pytest.approx(1.5e-3 + 6e-5)


@pytest.mark.multiprocess
def test_ring_equals_all_reduce_and_counts_2_n_minus_1_over_n_k():
    numel = 1001  # odd: not a multiple of 2, 3 or 4
    rows = launch(traffic_survey, 4, [2, 3, 4], numel, 7)[0]  # asserts ring == PS == dist.all_reduce inside
    assert [r["n"] for r in rows] == [2, 3, 4]
    for row in rows:
        n, nbytes = row["n"], row["bytes"]
        assert nbytes == numel * 4
        for sent, received in zip(row["ring_sent"], row["ring_received"]):
            # up to chunk rounding: at most one element per chunk, two chunks off
            assert abs(sent - ring_traffic_bytes(numel, n, 4)) < 2 * 4
            assert abs(received - ring_traffic_bytes(numel, n, 4)) < 2 * 4
        assert sum(row["ring_sent"]) == sum(row["ring_received"]) == 2 * (n - 1) * nbytes  # exact in total
        assert row["ps_sent"][0] == row["ps_received"][0] == parameter_server_traffic_bytes(numel, n, 4)
        assert all(s == nbytes for s in row["ps_sent"][1:])


@pytest.mark.multiprocess
@pytest.mark.parametrize("n", [2, 3])
def test_ring_handles_any_shape_layout_and_dtype(n):
    assert launch(ring_on_awkward_tensors, n, 5) == [5] * n


@pytest.mark.multiprocess
def test_tensor_shorter_than_world_size_is_a_clear_error():
    with pytest.raises(LaunchError, match="cannot be cut into 3 ring chunks"):
        launch(ring_on_too_short_tensor, 3)

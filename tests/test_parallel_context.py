"""Ring attention (context parallelism) against full causal SDPA; zig-zag balance; traffic."""

import pytest
import torch

from gputrain.parallel import launch
from gputrain.parallel.context import blocks_per_rank, chunk_ids, ring_bytes, ring_check, split_sequence


@pytest.mark.multiprocess
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("zigzag", [True, False])
def test_ring_attention_forward_and_backward_equal_sdpa(n, zigzag):
    results = launch(ring_check, n, 2, 2, 16, 8, zigzag)  # B=2, H=2, T=16, D=8, float64
    expected = ring_bytes(2, 2, 16, 8, n, 8)
    for r in results:
        assert max(r["errors"].values()) < 1e-5, r["errors"]
        assert (r["forward_bytes"], r["backward_bytes"]) == (expected["forward"], expected["backward"])
    assert [r["blocks"] for r in results] == blocks_per_rank(n, zigzag)


def test_zigzag_balances_the_causal_work():
    for n in (2, 4, 8):
        assert blocks_per_rank(n, True) == [2 * n + 1] * n
        assert blocks_per_rank(n, False) == [4 * r + 3 for r in range(n)]
        assert sum(blocks_per_rank(n, True)) == sum(blocks_per_rank(n, False)) == n * (2 * n + 1)
        # every chunk belongs to exactly one rank
        assert sorted(i for r in range(n) for i in chunk_ids(r, n)) == list(range(2 * n))


def test_sequence_not_divisible_by_twice_the_degree_is_refused():
    x = torch.zeros(1, 1, 12, 4)
    assert split_sequence(x, 3, 0).shape[-2] == 4
    with pytest.raises(ValueError, match="sequence length 12 is not divisible by 2 x CP degree = 8"):
        split_sequence(x, 4, 0)

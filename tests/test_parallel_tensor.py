"""Megatron-style tensor parallelism from scratch against one device and torch.distributed.tensor.parallel."""

import pytest
import torch.distributed as dist

from gputrain.model import Block, GPTConfig
from gputrain.parallel import LaunchError, launch
from gputrain.parallel.tensor import TensorParallelMLP, shard_range, tensor_parallel_check


def shard_a_block_mlp(n_embd: int) -> None:
    TensorParallelMLP.from_dense(Block(GPTConfig(n_embd=n_embd, n_head=1)).mlp)


def test_shard_ranges_tile_the_dimension():
    assert [shard_range(128, 4, r) for r in range(4)] == [(0, 32), (32, 64), (64, 96), (96, 128)]


def test_degree_that_does_not_divide_is_a_clear_error():
    with pytest.raises(ValueError, match="degree 3 does not divide the hidden size 128"):
        shard_range(128, 3, 0, "hidden size")
    with pytest.raises(ValueError, match="degree must be >= 1"):
        shard_range(128, 0, 0)


@pytest.mark.multiprocess
@pytest.mark.parametrize("n", [2, 4])
def test_tensor_parallel_mlp_matches_one_device_and_torch_tp(n):
    results = launch(tensor_parallel_check, n, 32, 3, 5, n)  # C=32, hidden 128, B=3, T=5
    for r in results:
        assert max(r["errors"].values()) < 1e-5, r["errors"]
        assert r["fc_shard"] == (128 // n, 32) and r["proj_shard"] == (32, 128 // n)
        # Megatron's count: one all-reduce of the activations forward, one backward
        assert r["allreduces"] == 2 and r["allreduced_bytes"] == 2 * r["activation_bytes"]


@pytest.mark.multiprocess
def test_three_way_split_of_a_128_wide_hidden_layer_is_refused():
    with pytest.raises(LaunchError, match="degree 3 does not divide the hidden size 128"):
        launch(shard_a_block_mlp, 3, 32)
    assert not dist.is_initialized()  # nothing leaked into the test process

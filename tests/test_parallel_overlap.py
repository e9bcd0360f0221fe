"""Data parallelism by hand (naive, bucketed with gradient hooks) against DistributedDataParallel."""

import pytest
import torch.distributed as dist

from gputrain.parallel import launch
from gputrain.parallel.overlap import overlap_check, overlap_trace


def build_with_bucket(size: float) -> None:
    from gputrain.parallel.overlap import BucketedAllReduce, mlp

    BucketedAllReduce(mlp(8, 2), size)


@pytest.mark.multiprocess
@pytest.mark.parametrize("n", [2, 4])
def test_naive_and_bucketed_gradients_equal_ddp(n):
    for r in launch(overlap_check, n, 16, 3, 4, 600.0):
        assert r["local_vs_ddp"] > 1e-3  # the ranks' own gradients differ from the averaged one...
        assert r["naive_vs_ddp"] < 1e-6 and r["bucketed_vs_ddp"] < 1e-6  # ...which both schemes reproduce
        # 3 layers of 16x16 weights + 16 biases, 4 bytes each, packed from the last layer in >= 600-byte buckets
        assert r["buckets"] == [1088, 1088, 1088]


@pytest.mark.multiprocess
def test_buckets_launch_during_the_backward_in_reverse_layer_order():
    t = launch(overlap_trace, 2, 64, 4, 8, 64 * 65 * 4, 2)[0]  # one Linear per bucket
    assert [b["layers"] for b in t["buckets"]] == [[3], [2], [1], [0]]
    launches = [b["launch"] for b in t["buckets"]]
    assert launches == sorted(launches) and launches[0] < t["backward_end"]  # the first one overlaps
    for b in t["buckets"]:  # each bucket leaves only once its layer's gradients exist
        assert b["launch"] >= t["layers"][b["layers"][0]][0] and b["done"] >= b["launch"]


@pytest.mark.multiprocess
@pytest.mark.parametrize("size", [0, -1.0])
def test_bucket_size_must_be_positive(size):
    with pytest.raises(Exception, match="bucket_bytes must be > 0"):
        launch(build_with_bucket, 1, size)
    assert not dist.is_initialized()

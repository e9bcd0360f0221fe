"""Data parallelism for real: Accelerate DDP gradients, a straggler, FSDP2 shards and losses."""

import pytest
import torch

from gputrain.parallel import launch
from gputrain.parallel.data_parallel import ddp_accelerate_step, fsdp_check, straggler_steps


@pytest.mark.multiprocess
def test_accelerate_ddp_averages_gradients_like_one_process_with_the_whole_batch():
    r = launch(ddp_accelerate_step, 2, 8)[0]
    assert r["local_spread"] > 1e-3  # before the all-reduce the ranks disagree
    assert r["synced_spread"] == 0.0  # after it they hold the very same gradient
    assert r["mean_of_locals_err"] < 1e-6  # ...which is the mean of the local ones
    assert r["whole_batch_err"] < 1e-5 * max(1.0, r["grad_scale"])  # ...= one process, whole batch
    assert r["weights_spread_after_step"] == 0.0


@pytest.mark.multiprocess
def test_one_slow_rank_sets_every_ranks_step_time():
    delay = 0.15
    fast, slow = launch(straggler_steps, 2, 1, delay, 3)
    assert slow["one slow"]["own"] >= delay  # the straggler's own work holds the delay
    assert fast["one slow"]["own"] < delay / 2  # the fast rank's own work does not...
    assert fast["one slow"]["step"] >= 0.8 * delay  # ...but its step waits for the straggler


@pytest.mark.multiprocess
@pytest.mark.parametrize("n", [2, 3])
def test_fsdp2_shards_parameters_and_matches_the_unsharded_loss(n):
    results = launch(fsdp_check, n, 2, 32, 6, 8, 3)
    full = results[0]["full_param_bytes"]
    assert sum(r["local_param_bytes"] for r in results) == full  # every byte held exactly once
    for r in results:
        # 1/N each, up to rows of 4-byte floats when a dimension does not split evenly
        assert abs(r["local_param_bytes"] - full / n) <= 0.05 * full / n
        assert r["local_optimizer_bytes"] == 2 * r["local_param_bytes"]  # AdamW's m and v, sharded too
        assert r["losses"] == pytest.approx(r["ref_losses"], rel=1e-5)


def train_through_accelerate(fsdp: bool) -> dict:
    """gputrain.train on this rank, with or without Accelerate's FSDP2 plugin; the bytes it holds."""
    from gputrain.train import TrainConfig, train

    cfg = TrainConfig(
        fsdp=fsdp,
        max_steps=5,
        warmup_steps=0,
        eval_interval=0,
        progress=False,
        n_layer=2,
        n_embd=64,
        batch_size=8,
        corpus_bytes=100_000,
        seed=0,
    )
    result = train(cfg)
    params = list(result.model.parameters())
    local = sum((p.to_local() if hasattr(p, "to_local") else p).numel() * p.element_size() for p in params)
    return {"losses": result.losses, "local": local, "full": sum(p.numel() * p.element_size() for p in params)}


@pytest.mark.gpu
@pytest.mark.multiprocess
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="Accelerate's FSDP needs two or more CUDA GPUs")
def test_accelerate_fsdp_plugin_in_gputrain_train():
    n = torch.cuda.device_count()
    sharded = launch(train_through_accelerate, n, True, timeout=300)
    plain = launch(train_through_accelerate, n, False, timeout=300)  # DDP
    for r in sharded:
        assert abs(r["local"] - r["full"] / n) <= 0.05 * r["full"] / n  # 1/N of the model per rank
    assert sharded[0]["losses"] == pytest.approx(plain[0]["losses"], rel=1e-3)

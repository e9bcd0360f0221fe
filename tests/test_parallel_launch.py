"""gputrain.parallel.launch: real processes, rank-ordered output, clear failures instead of hangs."""

import os
import time

import pytest
import torch
import torch.distributed as dist

from gputrain.parallel import LaunchError, format_outputs, launch


# Per-rank functions must be importable by the children: they live at module level here.
def report_rank(scale: int) -> int:
    x = torch.tensor([dist.get_rank() + 1.0])
    dist.all_reduce(x)  # a real collective: the ranks are connected
    print(f"rank {dist.get_rank()} of {dist.get_world_size()} sees sum {int(x.item())}")
    print("second line")
    return dist.get_rank() * scale


def raise_on_rank_one() -> None:
    if dist.get_rank() == 1:
        raise ValueError("boom from rank 1")
    dist.barrier()  # the others wait for rank 1 forever: launch must not


def die_on_rank_one() -> None:
    if dist.get_rank() == 1:
        os._exit(3)
    dist.barrier()


def hang_on_rank_one() -> None:
    if dist.get_rank() == 1:
        time.sleep(600)
    dist.barrier()


@pytest.mark.multiprocess
def test_launch_returns_values_and_output_in_rank_order(capsys):
    results = launch(report_rank, 3, 10)
    assert list(results) == [0, 10, 20]
    shown = capsys.readouterr().out.strip().split("\n")
    assert shown == [f"[rank {r}] {line}" for r in range(3) for line in (f"rank {r} of 3 sees sum 6", "second line")]
    assert results.outputs[2] == "rank 2 of 3 sees sum 6\nsecond line\n"


@pytest.mark.multiprocess
def test_rank_that_raises_fails_fast_with_its_traceback():
    t0 = time.perf_counter()
    with pytest.raises(LaunchError) as err:
        launch(raise_on_rank_one, 2, timeout=60)
    message = str(err.value)
    assert "rank 1 of 2 raised ValueError: boom from rank 1" in message
    assert "Traceback" in message and "raise_on_rank_one" in message
    assert time.perf_counter() - t0 < 30  # well inside the 60 s timeout: not a hang


@pytest.mark.multiprocess
def test_dead_rank_is_reported():
    with pytest.raises(LaunchError, match=r"rank 1 \(exit code 3\) died"):
        launch(die_on_rank_one, 2, timeout=60)


@pytest.mark.multiprocess
def test_hanging_rank_times_out():
    t0 = time.perf_counter()
    with pytest.raises(LaunchError, match="timed out"):
        launch(hang_on_rank_one, 2, timeout=4)
    assert time.perf_counter() - t0 < 20


def test_bad_arguments_are_refused_before_starting_anything():
    with pytest.raises(ValueError, match="nprocs must be a positive integer"):
        launch(report_rank, 0, 1)
    with pytest.raises(ValueError, match="not importable"):
        launch(lambda: None, 2)


def test_format_outputs_prefixes_every_line_in_rank_order():
    assert format_outputs(["a\nb\n", "", "c\n"]) == "[rank 0] a\n[rank 0] b\n[rank 2] c"

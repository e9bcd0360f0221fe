"""Tensor-parallel attention + MLP block and sequence parallelism against one device and torch's TP styles."""

import pytest

from gputrain.memory import korthikanti_activations
from gputrain.parallel import LaunchError, launch
from gputrain.parallel.sequence import block_check, korthikanti_per_layer, saved_activation_bytes, torch_tp_check


def split_six_heads() -> None:
    from gputrain.parallel.sequence import DenseBlock, ParallelBlock

    ParallelBlock(DenseBlock(24, 6))


@pytest.mark.multiprocess
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("sequence", [False, True])
def test_block_equals_one_device_and_traffic_equals_the_formula(n, sequence):
    for r in launch(block_check, n, 8, 2, 16, 4, sequence):
        assert max(r["errors"].values()) < 1e-6, r["errors"]
        K = r["activation_bytes"]  # one (s, b, h) tensor
        if sequence:  # forward 2 AG + 2 RS; backward 2 RS, 2 AG for dY of the RS, 2 re-gathers of the inputs
            assert r["calls"] == {"all-gather": 6, "reduce-scatter": 4, "all-reduce (parameters)": 6}
            assert r["sent_bytes"] == pytest.approx(10 * (n - 1) / n * K)
        else:  # Megatron: 2 all-reduces forward, 2 backward, 2(t-1)/t K each on a ring
            assert r["calls"] == {"all-reduce": 4}
            assert r["sent_bytes"] == pytest.approx(4 * 2 * (n - 1) / n * K)


@pytest.mark.multiprocess
@pytest.mark.parametrize("sequence", [False, True])
def test_torch_tensor_parallel_styles_agree(sequence):
    for errors in launch(torch_tp_check, 2, 8, 2, 16, 4, sequence):
        assert max(errors.values()) < 1e-12, errors


@pytest.mark.multiprocess
@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("sequence", [False, True])
def test_saved_activations_equal_korthikanti(n, sequence):
    s, b, h, a = 16, 2, 32, 4
    r = launch(saved_activation_bytes, n, s, b, h, a, sequence)[0]
    assert r["bytes"] == r["formula"] == korthikanti_per_layer(s, b, h, a, n, sequence, r["mask_bytes"])
    if n == 1:
        assert r["paper"] == korthikanti_activations(s, b, h, a)


def test_sequence_parallelism_divides_everything_by_t():
    s, b, h, a = 2048, 1, 12288, 96
    for t in (2, 4, 8):
        assert korthikanti_per_layer(s, b, h, a, t, True) == pytest.approx(korthikanti_activations(s, b, h, a) / t)
        assert korthikanti_per_layer(s, b, h, a, t, False) > korthikanti_per_layer(s, b, h, a, t, True)


@pytest.mark.multiprocess
def test_heads_not_divisible_by_the_degree_are_refused():
    with pytest.raises(LaunchError, match="6 attention heads cannot be split over a tensor-parallel degree of 4"):
        launch(split_six_heads, 4)


def test_the_sequence_package_stays_in_modules_a_reader_can_hold():
    """sequence.py had grown to 401 lines; its collectives, blocks, activation formula and per-rank checks are
    now modules under 300 lines whose imports flow one way, and every name is still sequence.<name>."""
    from package_layout import check_exports, check_layout

    check_layout("gputrain.parallel.sequence")
    check_exports("gputrain.parallel.sequence")

import pytest
import torch

import gputrain as gt
from gputrain import device as dv
from gputrain import results


def test_preset_follows_hardware(monkeypatch):
    monkeypatch.delenv("GPUTRAIN_PRESET", raising=False)
    assert gt.preset() == ("gpu" if torch.cuda.is_available() else "cpu")


@pytest.mark.parametrize("name", ["cpu", "gpu"])
def test_preset_override(monkeypatch, name):
    monkeypatch.setenv("GPUTRAIN_PRESET", name)
    assert gt.preset() == name
    assert gt.pick(cpu=1, gpu=2) == (2 if name == "gpu" else 1)


def test_bad_preset_names_the_allowed_values(monkeypatch):
    monkeypatch.setenv("GPUTRAIN_PRESET", "nonsense")
    with pytest.raises(dv.PresetError) as err:
        gt.preset()
    message = str(err.value)
    assert "\n" not in message and "'nonsense'" in message and "cpu, gpu" in message


def test_peak_table_matches_datasheets():
    assert dv.peak_flops("bf16", "NVIDIA H200") == pytest.approx(989.4e12)
    assert dv.peak_flops("bf16", "NVIDIA H100 80GB HBM3") == pytest.approx(989.4e12)
    assert dv.peak_flops("bf16", "NVIDIA A100-SXM4-80GB") == pytest.approx(312e12)
    assert dv.peak_flops("fp8", "NVIDIA A100-SXM4-80GB") is None  # Ampere has no FP8
    assert dv.peak_flops("bf16", "Intel Xeon") is None


def test_timer_measures_elapsed_time():
    import time

    with dv.Timer(torch.device("cpu")) as t:
        time.sleep(0.05)
    assert 0.04 < t.seconds < 1.0


def test_info_has_versions_and_preset():
    info = gt.info()
    assert info["torch"] == torch.__version__
    assert info["preset"] in dv.PRESETS
    assert "preset=" in gt.info_line()


def test_results_round_trip_with_provenance(tmp_path):
    path = tmp_path / "r" / "x.json"
    assert results.read_result(path) is None
    results.write_result(path, {"tflops": [1.0, 2.0]}, command="bench x")
    r = results.read_result(path)
    assert r["data"] == {"tflops": [1.0, 2.0]}
    assert r["provenance"]["torch"] == torch.__version__ and r["provenance"]["command"] == "bench x"
    assert "Measured on" in results.provenance_note(r)
    assert not list(path.parent.glob("*.tmp"))


def test_median_seconds_repeats_short_calls_and_waits_for_work():
    import time

    calls = []
    assert 0.009 < dv.median_seconds(lambda: time.sleep(0.01), repeats=3, warmup=1) < 0.5
    dv.median_seconds(lambda: calls.append(1), repeats=3, warmup=2, min_seconds=0.001)
    assert len(calls) > 3 + 2 + 1  # each sample repeated the cheap call many times

import platform
from pathlib import Path

import pytest
import torch
from package_layout import check_exports, check_layout

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


# --- the GPU table (chapter 11) ------------------------------------------------------------


def bib_keys() -> set[str]:
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "book" / "references.bib").read_text(encoding="utf-8")
    return set(re.findall(r"^@\w+\{\s*([^,\s]+)\s*,", text, re.M))


def test_every_gpu_figure_has_a_source_in_the_bibliography():
    import dataclasses

    keys = bib_keys()
    for name, spec in dv.GPU_SPECS.items():
        figures = {
            f.name
            for f in dataclasses.fields(spec)
            if f.name not in ("name", "model", "sources", "notes", "inferred", "aliases")
        }
        given = {f for f in figures if getattr(spec, f) not in (None, {})}
        assert given <= set(spec.sources), f"{name}: no source for {sorted(given - set(spec.sources))}"
        assert set(spec.sources) <= given, f"{name}: a source for a missing figure {sorted(set(spec.sources) - given)}"
        cited = {k for ks in spec.sources.values() for k in ks}
        assert cited <= keys, f"{name}: {sorted(cited - keys)} not in book/references.bib"
        assert set(spec.notes) <= figures, f"{name}: a note on no figure"
        assert set(spec.peaks) <= set(dv.PEAK_FORMATS)


def test_peak_table_is_the_gpu_tables_peaks_and_matches_the_datasheets():
    assert dv.PEAK_FLOPS == {name: spec.peaks for name, spec in dv.GPU_SPECS.items()}
    assert dv.peak_flops("fp8", "NVIDIA H800") == pytest.approx(1978.9e12)
    assert dv.peak_flops("fp64", "NVIDIA H800") is None  # reduced for export; no figure is cited
    assert dv.peak_flops("fp64", "NVIDIA H100 80GB HBM3") == 66.9e12  # the FP64 Tensor Core rate, not 67
    assert dv.PEAK_FLOPS["H200"] == dv.PEAK_FLOPS["H100"]  # the same compute; only the memory differs
    for spec in dv.GPU_SPECS.values():
        p = spec.peaks
        assert p["fp16"] == p["bf16"] == pytest.approx(2 * p["tf32"], rel=0.01) and p["bf16"] > p["fp32"]
        assert "fp8" not in p or p["fp8"] == pytest.approx(2 * p["bf16"], rel=0.01)  # published figures are rounded


# What torch.cuda.get_device_name() says on each card, and the card's (key, dense BF16, HBM bandwidth).
REAL_NAMES = {
    "NVIDIA H100 80GB HBM3": ("H100", 989.4e12, 3.35e12),
    "NVIDIA H100 PCIe": ("H100 PCIe", 756e12, 2.0e12),
    "NVIDIA H100 NVL": ("H100 NVL", 835.5e12, 3.9e12),
    "NVIDIA H800": ("H800", 989.4e12, 3.35e12),
    "NVIDIA H200": ("H200", 989.4e12, 4.8e12),
    "NVIDIA A100-SXM4-80GB": ("A100", 312e12, 2.039e12),
    "NVIDIA A100-SXM4-40GB": ("A100 40GB", 312e12, 1.555e12),
    "NVIDIA A100 80GB PCIe": ("A100 PCIe 80GB", 312e12, 1.935e12),
    "NVIDIA A100-PCIE-40GB": ("A100 PCIe 40GB", 312e12, 1.555e12),
    "NVIDIA L4": ("L4", 121e12, None),
}


@pytest.mark.parametrize("name", REAL_NAMES)
def test_each_device_name_gets_its_own_cards_figures(name):
    key, bf16, hbm = REAL_NAMES[name]
    spec = dv.gpu_spec(name)
    assert spec is not None and spec.name == key, f"{name} -> {spec and spec.name}"
    assert dv.peak_flops("bf16", name) == bf16 and spec.hbm_bandwidth == hbm


def test_h100_pcie_and_nvl_are_not_the_sxm():
    pcie, nvl = dv.gpu_spec("NVIDIA H100 PCIe"), dv.gpu_spec("NVIDIA H100 NVL")
    assert pcie.sms == 114 and pcie.hbm_bytes == 80 * dv.GiB
    assert nvl.hbm_bytes == 94 * dv.GiB and nvl.sms is None  # no source we cite gives the NVL's SMs
    assert dv.gpu_spec("NVIDIA A100-SXM4-40GB").hbm_bytes == 40 * dv.GiB


@pytest.mark.parametrize(
    "name",
    ["NVIDIA H800 PCIe", "NVIDIA H200 NVL", "NVIDIA GH200 480GB", "NVIDIA L40S", "NVIDIA A100-SXM4-40GB MIG 1g.5gb"],
)
def test_a_variant_the_table_lacks_is_unknown_and_says_so(name):
    assert dv.gpu_spec(name) is None and dv.peak_flops("bf16", name) is None  # never a sibling's numbers
    line = dv.unknown_gpu(name)
    assert "\n" not in line and repr(name) in line and "unknown" in line


def test_unknown_variant_names_the_cards_the_table_knows():
    assert "(it knows H800)" in dv.unknown_gpu("NVIDIA H800 PCIe")
    assert "it knows" not in dv.unknown_gpu("NVIDIA GH200 480GB")


@pytest.mark.parametrize(("name", "shown"), [("NVIDIA H100 PCIe", "H100 PCIe 80 GB"), ("NVIDIA H800 PCIe", "unknown")])
def test_info_names_the_table_entry_of_the_gpu_it_runs_on(monkeypatch, name, shown):
    # info looks both up in gputrain.device.report, where it lives
    monkeypatch.setattr(dv.report, "device", lambda: torch.device("cuda"))
    monkeypatch.setattr(dv.report, "device_name", lambda dev=None: name)
    info = dv.info()
    assert shown in info["gpu_table"]
    assert info["peak_bf16_tflops"] == (756.0 if shown != "unknown" else None)


def test_figures_no_source_gives_are_the_h100s_and_marked_inferred():
    h100 = dv.GPU_SPECS["H100"]
    assert set(dv.GPU_SPECS["H800"].inferred) == {
        "hbm_bytes",
        "hbm_bandwidth",
        "boost_clock_hz",
        "tensor_clock_hz",
        "l2_bytes",
    }
    assert set(dv.GPU_SPECS["H200"].inferred) == {"sms", "boost_clock_hz", "tensor_clock_hz", "l2_bytes"}
    for spec in dv.GPU_SPECS.values():
        assert all(getattr(spec, f) == getattr(h100, f) for f in spec.inferred), spec.name
    assert not h100.inferred and not dv.GPU_SPECS["H100 PCIe"].inferred


def test_hbm_capacity_is_in_binary_gigabytes():
    assert dv.GPU_SPECS["H100"].hbm_bytes == 5 * 16 * 2**30  # five 16 GiB stacks
    assert dv.GPU_SPECS["H200"].hbm_bytes == 141 * 2**30


def test_gpu_lookup_matches_device_names_and_knows_no_cpu():
    assert dv.gpu_spec("NVIDIA H100 80GB HBM3").name == "H100"
    assert dv.gpu_spec("NVIDIA A100-SXM4-80GB").sms == 108
    assert dv.gpu_spec("NVIDIA H800").nvlink_bandwidth == 400e9  # against the H100's 900 GB/s
    assert dv.gpu_spec("AMD EPYC") is None


def test_hopper_sm_figures_and_the_articles_228_kb():
    h100, h800, h200, a100 = (dv.GPU_SPECS[n] for n in ("H100", "H800", "H200", "A100"))
    assert h100.shared_per_sm == 228 * 1024 < h100.l1_shared_per_sm == 256 * 1024  # a carve-out of 256 KB
    assert a100.shared_per_sm == 164 * 1024 < a100.l1_shared_per_sm == 192 * 1024
    assert h800.shared_per_sm == h200.shared_per_sm == h100.shared_per_sm
    for spec in (h100, a100):
        assert spec.registers_per_sm == 64 * 1024 * 4  # 64 K 32-bit registers
        assert spec.max_warps_per_sm * spec.warp_size == 2048  # resident threads per SM
        assert spec.shared_bytes_per_clock == 32 * 4  # 32 banks of 4 bytes


def test_sram_bandwidth_is_about_ten_times_hbm_on_an_h100_and_less_on_an_h200():
    h100, h800, h200, a100 = (dv.GPU_SPECS[n] for n in ("H100", "H800", "H200", "A100"))
    assert h100.shared_bandwidth == pytest.approx(128 * 132 * 1.98e9)  # 33.5 TB/s
    assert a100.shared_bandwidth == pytest.approx(19.49e12, rel=1e-3)  # FlashAttention's "19 TB/s"
    assert h100.shared_to_hbm == h800.shared_to_hbm == pytest.approx(9.99, abs=0.01)
    assert h200.shared_to_hbm == pytest.approx(6.97, abs=0.01)  # same SRAM, faster HBM
    assert a100.shared_to_hbm == pytest.approx(9.56, abs=0.01)
    assert max(s.shared_to_hbm for s in (h100, h800, h200, a100)) < 10  # these four: never "more than ten times"


def test_shared_memory_to_hbm_ratio_depends_on_the_card():
    ratio = {name: spec.shared_to_hbm for name, spec in dv.GPU_SPECS.items()}
    assert ratio["A100 40GB"] == ratio["A100 PCIe 40GB"] == pytest.approx(12.53, abs=0.01)  # slower HBM: over ten
    assert ratio["H100 PCIe"] == pytest.approx(12.75)  # 51 TFLOP/s FP32 / 2 FLOPs per lane, over 2.0 TB/s
    assert round(ratio["H100"], 1) == round(ratio["H800"], 1) == 10.0
    assert round(ratio["A100"], 1) == 9.6 and round(ratio["H200"], 1) == 7.0
    assert ratio["H100 NVL"] is None and ratio["L4"] is None  # no SMs or clock cited: unknown, not guessed


def test_memory_hierarchy_rows_shrink_in_capacity_and_name_unknown_bandwidths():
    for name in ("A100", "H100", "H800", "H200"):
        rows = dv.memory_hierarchy(name)
        assert [r.level for r in rows] == ["registers", "shared memory", "L2", "HBM"]
        assert rows[0].bandwidth is None  # no source gives a register-file bandwidth
        assert rows[1].bandwidth > rows[3].bandwidth
        assert rows[1].capacity < rows[2].capacity < rows[3].capacity
        assert all(r.sources for r in rows)
    assert dv.memory_hierarchy("H100")[2].bandwidth is None  # Hopper's L2 bandwidth is not published
    assert dv.memory_hierarchy("A100")[2].bandwidth == pytest.approx(5120 * 1.41e9)
    with pytest.raises(ValueError, match="use one of: H200, H100, H100 PCIe, H800, A100"):
        dv.memory_hierarchy("L4")
    with pytest.raises(ValueError, match="no memory figures for 'NVIDIA H100 NVL'"):
        dv.memory_hierarchy("NVIDIA H100 NVL")  # no cited source gives the NVL's SMs


def test_ridge_points_from_the_table():
    assert dv.GPU_SPECS["H100"].ridge("bf16") == pytest.approx(989.4 / 3.35)  # about 295 FLOPs per byte
    assert dv.GPU_SPECS["A100"].ridge("bf16") == pytest.approx(312 / 2.039)
    assert dv.GPU_SPECS["L4"].ridge("bf16") is None  # no memory figures for the L4


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="reads Linux's /proc/cpuinfo")
def test_a_cpu_is_named_by_its_model_not_its_architecture():
    """platform.processor() says "x86_64" on Linux, and every CPU provenance used to say just that."""
    models = [
        ln.split(":", 1)[1].strip()
        for ln in Path("/proc/cpuinfo").read_text().splitlines()
        if ln.startswith("model name")
    ]
    expected = models[0] if models else platform.processor() or platform.machine()
    assert dv.cpu_name() == expected and dv.device_name(torch.device("cpu")) == expected


def test_the_device_and_speed_packages_stay_in_modules_a_reader_can_hold():
    """device.py (589 lines: presets, the GPU table, name matching, timers, info) and speed.py (476: probes,
    bf16, process cost, throughput, operator counts) are packages of modules under 300 lines, drawn in each
    package's docstring; a module imports only those drawn above it, and each package re-exports every name."""
    for package in ("gputrain.device", "gputrain.speed"):
        check_layout(package)
        check_exports(package)


def test_every_device_and_speed_name_the_book_reads_still_resolves():
    """The chapters read gt.device.median_seconds, gputrain.device.GPU_SPECS, speed.cpu_threads and more; each
    name they import or read through those paths is still there after the split."""
    import ast
    import importlib
    import json

    root = Path(__file__).resolve().parents[1]
    packages = {"gputrain.device", "gputrain.speed"}
    wanted: set[tuple[str, str]] = set()
    for nb in sorted([*root.glob("chapters/*.ipynb"), *root.glob("book/*.ipynb")]):
        for cell in json.loads(nb.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "code":
                continue
            code = "".join(cell["source"])
            try:
                tree = ast.parse(
                    "\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!")))
                )
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module in packages:
                    wanted |= {(node.module, a.name) for a in node.names}
                elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
                    base = node.value
                    if isinstance(base.value, ast.Name) and base.value.id in ("gt", "gputrain"):
                        if f"gputrain.{base.attr}" in packages:
                            wanted.add((f"gputrain.{base.attr}", node.attr))
    assert len(wanted) > 10, wanted  # the chapters read these names: the search found them
    missing = sorted(f"{m}.{n}" for m, n in wanted if not hasattr(importlib.import_module(m), n))
    assert missing == [], f"the book reads {missing}, which the packages no longer have"

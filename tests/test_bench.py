"""gputrain.bench: the hand-written attention against SDPA, the ladder's rules, its table, JSON and CLI."""

import json
import re
import statistics

import pytest
import torch
from helpers import TINY_LADDER, cli_flags, run_cli

from gputrain.bench import (
    RUNG_NAMES,
    Batches,
    HandWrittenAttention,
    LadderConfig,
    cpu_ladder,
    gpu_ladder,
    padded_vocab,
    plan,
    run_ladder,
    skip_reason,
    use_hand_written_attention,
)
from gputrain.cli import main
from gputrain.model import GPT, GPTConfig
from gputrain.results import read_result
from gputrain.speed import Bf16Support

TINY = dict(
    n_layer=2,
    n_head=4,
    n_embd=64,
    block_size=64,
    vocab_size=300,
    batch_size=4,
    big_batch_size=8,
    steps=2,
    rounds=2,
    warmup=1,
    compile=False,
)


def test_hand_written_attention_matches_sdpa_values_and_gradients():
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=101, block_size=48, n_layer=2, n_head=4, n_embd=64)
    ref = GPT(cfg)
    ours = GPT(cfg)
    ours.load_state_dict(ref.state_dict())
    use_hand_written_attention(ours)
    assert all(isinstance(b.attn, HandWrittenAttention) for b in ours.blocks)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in ref.named_parameters()]  # same names
    idx = torch.randint(0, 101, (3, 40))  # shorter than the context: the mask is cropped
    _, loss_ref = ref(idx, idx)
    _, loss_ours = ours(idx, idx)
    torch.testing.assert_close(loss_ours, loss_ref)
    loss_ref.backward()
    loss_ours.backward()
    for (name, p), q in zip(ref.named_parameters(), ours.parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=name)


def test_padded_vocab_and_config_errors():
    assert padded_vocab(50257) == 50304 and padded_vocab(64) == 64 and padded_vocab(1000) == 1024
    assert gpu_ladder().vocab_size == 50257 and gpu_ladder().n_embd == 768 and gpu_ladder().block_size == 1024
    with pytest.raises(ValueError, match="unknown rung"):
        LadderConfig(rungs="fp32,warp_speed")
    with pytest.raises(ValueError, match="compile_scope"):
        LadderConfig(compile_scope="everything")
    with pytest.raises(ValueError, match="divisible"):
        LadderConfig(n_embd=100, n_head=3)
    with pytest.raises(ValueError, match="steps must be >= 1"):
        LadderConfig(steps=0)


def test_skips_on_a_cpu_say_why():
    cpu = torch.device("cpu")
    cfg = cpu_ladder(compile=False, rungs="fp32,tf32,bf16,compile")
    assert "tensor cores" in skip_reason("tf32", cfg, cpu)
    assert skip_reason("compile", cfg, cpu) == "left out (--compile adds it)"
    assert not cpu_ladder().compile and gpu_ladder().compile  # minutes of compiling on a small CPU
    assert skip_reason("sdpa", cfg, cpu) == "not selected (--rungs)"
    assert skip_reason("bf16", cfg, cpu) is None
    text = plan(cfg, cpu)
    assert text.count("SKIP") == 6 and len(text.splitlines()) == 1 + len(RUNG_NAMES)


def test_every_rung_sees_the_same_batches():
    cfg = LadderConfig(**TINY)
    a, b = Batches(cfg, torch.device("cpu")), Batches(cfg, torch.device("cpu"))
    for i in range(6):
        xa, ya = a.get(i, cfg.batch_size)
        xb, yb = b.get(i, cfg.big_batch_size)
        assert torch.equal(xa, xb[: cfg.batch_size]) and torch.equal(ya[:, :-1], xa[:, 1:])
        assert xa.shape == (cfg.batch_size, cfg.block_size)


def _bf16(native: bool):
    """A stand-in for gputrain.speed.native_bf16: this CPU's bf16 products, native or emulated."""
    return lambda dev_type=None: Bf16Support(native, 0.5 if native else 40.0, "stand-in")


@pytest.fixture(scope="module")
def ladder(tmp_path_factory):
    out = tmp_path_factory.mktemp("ladder") / "ladder.json"
    with pytest.MonkeyPatch.context() as mp:  # the cumulative ladder, whatever this CPU does with bf16
        mp.setattr("gputrain.bench.rung.native_bf16", _bf16(True))
        result = run_ladder(LadderConfig(**TINY), torch.device("cpu"), out=out, command="pytest", log=lambda m: None)
    return result, out


def test_ladder_rows_are_cumulative_and_skips_are_explained(ladder):
    result, _ = ladder
    assert [r["rung"] for r in result.rows] == list(RUNG_NAMES)
    measured = [r for r in result.rows if r["skipped"] is None]
    assert [r["rung"] for r in measured] == ["fp32", "fused_adamw", "bf16", "sdpa", "batch", "pad_vocab"]
    on = [sum(r["settings"].values()) for r in measured]
    assert on == sorted(on) and on[0] == 0 and on[-1] == len(measured) - 1  # one more switch per rung
    assert "tokens_per_s" not in result.row("tf32") and "tokens_per_s" not in result.row("compile")
    assert [r["builds_on"] for r in measured] == [None, "fp32", "fused_adamw", "bf16", "sdpa", "batch"]
    assert result.row("bf16")["label"] == "+ bf16 autocast (native)"
    assert result.row("batch")["batch_size"] == TINY["big_batch_size"]
    assert result.row("pad_vocab")["vocab_size"] == 320 and result.row("sdpa")["vocab_size"] == 300
    assert result.rounds_done == 2


def test_rungs_train_the_same_model_on_the_same_data(ladder):
    result, _ = ladder
    first = {r["rung"]: r["first_loss"] for r in result.rows if r["skipped"] is None}
    assert first["fused_adamw"] == first["fp32"]  # the first loss comes before any optimizer step
    assert first["bf16"] == pytest.approx(first["fp32"], abs=0.05)  # bf16 rounding, same function
    assert first["sdpa"] == pytest.approx(first["bf16"], abs=0.05)  # another kernel, same function
    for r in result.rows:
        if r["skipped"] is None:
            assert r["last_loss"] < r["first_loss"]  # every rung actually trains


def test_mfu_and_memory_follow_from_the_measurements(ladder):
    result, _ = ladder
    assert result.peak_datasheet is None and result.peak_measured > 0  # a CPU has no datasheet peak here
    for r in result.measured_rows():
        assert r["tokens_per_s"] > 0 and len(r["rounds_tokens_per_s"]) == 2
        assert r["mfu"] is None
        assert r["mfu_measured"] == pytest.approx(r["tokens_per_s"] * result.flops_per_token / result.peak_measured)
    # flash attention keeps no (B, H, T, T) matrices: counted peak below the hand-written bf16 rung's
    assert result.row("sdpa")["peak_memory_bytes"] < result.row("bf16")["peak_memory_bytes"]
    table = result.table()
    assert "+ SDPA flash attention" in table and "skipped: TF32" in table and "MFU" in table


def test_ladder_json_has_provenance_and_rows(ladder):
    result, out = ladder
    stored = read_result(out)
    assert stored["provenance"]["command"] == "pytest" and stored["provenance"]["torch"] == torch.__version__
    assert [r["rung"] for r in stored["data"]["rows"]] == list(RUNG_NAMES)
    assert stored["data"]["flops_per_token"] == result.flops_per_token


def test_time_cap_drops_later_rungs_but_keeps_one_round():
    cfg = LadderConfig(**{**TINY, "rounds": 5, "max_seconds": 1e-3, "rungs": "fp32,sdpa"})
    result = run_ladder(cfg, torch.device("cpu"), log=lambda m: None)
    assert result.row("fp32")["skipped"] is None and result.rounds_done == 1
    assert "time cap" in result.row("sdpa")["skipped"]
    assert any("stopped after 1 of 5 rounds" in n for n in result.notes)
    table = result.table().splitlines()  # the table itself says the run was capped
    assert "1 of 5 rounds of 2 steps per rung" in table[-2] and table[-1].startswith("CAPPED: stopped after 1 of 5")


def test_an_emulated_bf16_rung_is_measured_but_later_rungs_leave_it_out(monkeypatch):
    monkeypatch.setattr("gputrain.bench.rung.native_bf16", _bf16(False))
    cfg = LadderConfig(**{**TINY, "rounds": 1, "rungs": "fp32,bf16,sdpa,batch"})
    result = run_ladder(cfg, torch.device("cpu"), log=lambda m: None)
    bf16, sdpa, batch = (result.row(n) for n in ("bf16", "sdpa", "batch"))
    assert bf16["label"] == "+ bf16 autocast (emulated)" and bf16["tokens_per_s"] > 0  # measured and reported
    assert bf16["builds_on"] == "fp32" and "measured without it" in bf16["left_out_of_base"]
    assert sdpa["builds_on"] == "fp32" and not sdpa["settings"]["bf16"] and sdpa["settings"]["sdpa"]
    assert batch["builds_on"] == "sdpa" and not batch["settings"]["bf16"]
    table = result.table()
    assert "later rungs leave it out" in table and "note: + bf16 autocast (emulated): bf16 is emulated" in table
    sdpa_line = next(line for line in table.splitlines() if line.startswith("+ SDPA"))
    assert sdpa_line.split()[4] == "fp32"  # the "on top of" column, after the four words of the label
    assert "CAPPED" not in table


def test_bench_help_shows_each_presets_defaults():
    out = run_cli("bench", "--help", timeout=120)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())  # argparse wraps help lines
    cpu, gpu = cpu_ladder(), gpu_ladder()
    assert f"(default: {cpu.max_seconds} on cpu, {gpu.max_seconds} on gpu)" in text
    assert f"(default: {cpu.threads} on cpu, {gpu.threads} on gpu)" in text
    assert f"(default: {cpu.compile_scope} on cpu, {gpu.compile_scope} on gpu)" in text
    assert "(default: 600.0)" not in text  # the dataclass's own default is neither preset's


def test_loop_overhead_header_prints_the_threads_it_uses():
    from gputrain.train.overhead import loop_overhead

    lines = []
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        result = loop_overhead(steps=2, rounds=1, threads=1, log=lines.append)
    finally:
        torch.set_num_threads(saved)
    assert "threads=1" in lines[0] and result["threads"] == 1
    # the guard and the log row, timed apart from the noisy whole-loop ratio, as a share of a step
    assert 0 < result["bookkeeping_s"] < 0.01 and result["bookkeeping_share"] == pytest.approx(
        result["bookkeeping_s"] / (32 * 64 / statistics.median(result["plain_tokens_per_s"]))
    )
    assert re.search(r"bookkeeping \(spike and non-finite guard, metrics.csv row\): \d+ us a step", lines[-1])


def test_cli_bench_dry_run_and_bad_flag():
    env = {"GPUTRAIN_PRESET": "cpu"}
    out = run_cli("bench", "--dry-run", "--preset", "gpu", env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "12 x 768" in out.stdout and "SKIP: TF32" in out.stdout
    bad = run_cli("bench", "--compile-scope", "all", env=env, timeout=120)
    assert (
        bad.returncode == 2
        and bad.stderr.strip().count("\n") == 0
        and "--compile-scope" in bad.stderr
        and "model" in bad.stderr
    )


def test_cli_bench_writes_the_table_and_json(tmp_path, capsys):
    out = tmp_path / "ladder.json"
    flags = cli_flags(**TINY_LADDER, rungs="fp32,bf16")
    code = main(["bench", "--preset", "cpu", "--out", str(out), "--no-loop-overhead", *flags])
    assert code == 0
    printed = capsys.readouterr().out
    assert "fp32 baseline" in printed and "+ bf16 autocast" in printed and "6N + 12LTC" in printed
    stored = json.loads(out.read_text())
    assert stored["provenance"]["command"].startswith("gputrain bench --preset cpu --n-layer 1")
    assert stored["data"]["threads"] == 1 and stored["data"]["rounds_done"] == 1


@pytest.mark.gpu
def test_gpu_ladder_rungs_buy_speed_and_memory():
    cfg = LadderConfig(
        n_layer=4,
        n_head=12,
        n_embd=768,
        block_size=512,
        vocab_size=1000,
        batch_size=8,
        big_batch_size=16,
        steps=3,
        rounds=2,
        warmup=2,
        compile=False,
    )
    result = run_ladder(cfg, log=lambda m: None)
    assert result.peak_datasheet is not None, "add this GPU to gputrain.device.PEAK_FLOPS"
    assert all(r["skipped"] is None for r in result.rows if r["rung"] != "compile")
    fp32, tf32, bf16, sdpa = (result.row(n) for n in ("fp32", "tf32", "bf16", "sdpa"))
    assert tf32["tokens_per_s"] > 1.3 * fp32["tokens_per_s"]  # tensor cores, asked for
    assert bf16["tokens_per_s"] > 1.3 * fp32["tokens_per_s"]
    assert sdpa["peak_memory_bytes"] < bf16["peak_memory_bytes"]  # no T x T matrices kept
    assert 0 < result.row("pad_vocab")["mfu"] < 1


def test_the_bench_package_stays_in_modules_a_reader_can_hold():
    """bench.py had grown to 623 lines; each mechanism is now a module under 300 lines, imports flow one way
    down the package docstring's drawing, and every name is still importable from gputrain.bench."""
    from package_layout import check_exports, check_layout

    check_layout("gputrain.bench")
    check_exports("gputrain.bench")

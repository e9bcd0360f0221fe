"""The ladder run: build every rung, warm each up, time them in alternating rounds within a time cap."""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from typing import Callable, Optional

import torch

from ..device import device, device_name, synchronize
from ..flops import gpt_train_flops_per_token, matmul_params, mfu
from ..model import GPT, GPTConfig
from ..results import write_result
from ..speed import ThroughputMeter, cpu_threads, peak_for_mfu
from .config import RUNGS, LadderConfig
from .result import LadderResult
from .rung import Batches, Recipe, Rung, fresh_compile_caches, left_out_of_base, rung_label, skip_reason


def run_ladder(
    cfg: LadderConfig,
    dev: Optional[torch.device] = None,
    out=None,
    command: str = "",
    log: Callable[[str], None] = print,
) -> LadderResult:
    """Build every rung, warm each up, time them in alternating rounds, and return the table's data.

    With ``out`` the result is written (via :func:`gputrain.results.write_result`)
    after the warm-up and after every round, so a run cut short still leaves
    what it measured.  Appendix "Making it fast" explains each rung.
    """
    dev = dev or device()
    t_start = time.perf_counter()
    threads = contextlib.nullcontext() if not cfg.threads or dev.type != "cpu" else cpu_threads(cfg.threads)
    with threads, fresh_compile_caches(cfg.compile and cfg.cold_compile and "compile" in cfg.rung_list()):
        result = _empty_result(cfg, dev)
        save = (lambda: write_result(out, result.to_dict(), command=command)) if out else (lambda: None)
        rungs = _build_rungs(cfg, dev, result, t_start, save, log)
        _time_rounds(cfg, dev, result, rungs, t_start, save, log)
        if dev.type == "cpu":  # no allocator statistics on a CPU: count one step's tensors instead
            for rung, row in rungs:
                row["peak_memory_bytes"] = rung.cpu_peak_bytes()
        for rung, row in rungs:
            row["last_loss"] = rung.losses[-1] if rung.losses else None
        result.seconds_total = time.perf_counter() - t_start
        save()
    return result


def _empty_result(cfg: LadderConfig, dev: torch.device) -> LadderResult:
    """The result's header: the model's N and FLOPs per token (counted on the meta device) and the peaks."""
    with torch.device("meta"):  # N and the FLOPs per token, without allocating a model
        shape = GPT(
            GPTConfig(
                vocab_size=cfg.vocab_size,
                block_size=cfg.block_size,
                n_layer=cfg.n_layer,
                n_head=cfg.n_head,
                n_embd=cfg.n_embd,
            )
        )
    sheet, _ = peak_for_mfu("bf16", dev=dev) if dev.type == "cuda" else (None, "")
    measured, source = (
        peak_for_mfu("bf16", measured=True, dev=dev) if cfg.measured_peak or sheet is None else (None, "")
    )
    return LadderResult(
        config=dataclasses.asdict(cfg),
        device=device_name(dev),
        device_type=dev.type,
        flops_per_token=gpt_train_flops_per_token(shape),
        n_params=matmul_params(shape),
        peak_datasheet=sheet,
        peak_measured=measured,
        peak_measured_source=source,
        threads=torch.get_num_threads(),
    )


def _build_rungs(cfg, dev, result: LadderResult, t_start: float, save, log) -> list[tuple[Rung, dict]]:
    """Each rung adds one change to the base recipe; build and warm up those not skipped.

    A rung joins the base that later rungs build on unless :func:`left_out_of_base` says otherwise.
    """
    data = Batches(cfg, dev)
    base, base_name, rungs = Recipe(), None, []
    for name, label, why in RUNGS:
        row = {"rung": name, "label": rung_label(name, label, dev), "why": why, "skipped": skip_reason(name, cfg, dev)}
        # a rung starts only in the first three quarters of the cap: the rounds need the rest
        if row["skipped"] is None and rungs and time.perf_counter() - t_start > 0.75 * cfg.max_seconds:
            row["skipped"] = f"not run: the {cfg.max_seconds:.0f} s time cap was near"
        recipe = base
        if row["skipped"] is None:
            recipe = dataclasses.replace(base, **{name: True}) if name != "fp32" else base
            row.update(builds_on=base_name, left_out_of_base=left_out_of_base(name, dev))
            if not row["left_out_of_base"]:
                base, base_name = recipe, name
            log(f"warming up {row['label']} ...")
            rung = Rung(name, recipe, cfg, data, dev)
            row.update(_warm_up(rung, cfg))
            rungs.append((rung, row))
        row["settings"] = dataclasses.asdict(recipe)
        result.rows.append(row)
        save()  # a run cut short (a compile too slow for a deadline) keeps the warm-ups so far
    return rungs


def _time_rounds(cfg, dev, result: LadderResult, rungs, t_start: float, save, log) -> None:
    """Alternate the rungs round by round (so a change in machine load hits all alike) within the time cap."""
    meters = {rung.name: ThroughputMeter(dev) for rung, _ in rungs}
    peaks: dict[str, list[int]] = {rung.name: [] for rung, _ in rungs}
    last_round = 0.0
    for r in range(cfg.rounds):
        elapsed = time.perf_counter() - t_start
        if r and elapsed + last_round > cfg.max_seconds:
            result.notes.append(f"stopped after {r} of {cfg.rounds} rounds: the {cfg.max_seconds:.0f} s cap")
            break
        t_round = time.perf_counter()
        for rung, row in rungs:
            peaks[rung.name].append(_timed_round(rung, cfg, meters[rung.name]))
        last_round = time.perf_counter() - t_round
        result.rounds_done = r + 1
        _fill_rows(result, rungs, meters, peaks, cfg)
        result.seconds_total = time.perf_counter() - t_start
        save()
        log(f"round {r + 1}/{cfg.rounds} done in {last_round:.1f} s")


def _warm_up(rung: Rung, cfg: LadderConfig) -> dict:
    """Untimed steps; the first one's extra time is the compile (and first-call) cost."""
    times, first_loss = [], None
    for i in range(cfg.warmup + (1 if rung.recipe.compile else 0)):
        synchronize(rung.dev)
        t0 = time.perf_counter()
        loss = rung.step()
        value = loss.item()  # waits for the step
        times.append(time.perf_counter() - t0)
        if i == 0:
            first_loss = value
    steady = statistics.median(times[1:]) if len(times) > 1 else times[0]
    return {
        "batch_size": rung.batch_size,
        "vocab_size": rung.vocab_size,
        "first_loss": first_loss,
        "first_step_seconds": times[0],
        "compile_seconds": max(times[0] - steady, 0.0) if rung.recipe.compile else None,
    }


def _timed_round(rung: Rung, cfg: LadderConfig, meter: ThroughputMeter) -> int:
    """``cfg.steps`` timed steps of one rung; returns its peak memory in bytes (0 on a CPU)."""
    cuda = rung.dev.type == "cuda"
    if cuda:
        torch.cuda.synchronize(rung.dev)
        base = torch.cuda.memory_allocated(rung.dev)
        torch.cuda.reset_peak_memory_stats(rung.dev)
    tokens = cfg.steps * rung.batch_size * cfg.block_size
    with meter.measure(tokens):
        for _ in range(cfg.steps):
            loss = rung.step()
    rung.losses.append(loss.item())
    if not cuda:
        return 0
    # the allocator's peak counts every rung's resident weights: keep only this rung's own
    return torch.cuda.max_memory_allocated(rung.dev) - base + rung.state_bytes()


def _fill_rows(result: LadderResult, rungs, meters, peaks, cfg: LadderConfig) -> None:
    for rung, row in rungs:
        tps = meters[rung.name].tokens_per_s
        row.update(
            tokens_per_s=tps,
            rounds_tokens_per_s=meters[rung.name].rates,
            step_seconds=rung.batch_size * cfg.block_size / tps,
            mfu=mfu(tps, result.flops_per_token, result.peak_datasheet),
            mfu_measured=mfu(tps, result.flops_per_token, result.peak_measured),
            peak_memory_bytes=max(peaks[rung.name]) or None,
        )


def plan(cfg: LadderConfig, dev: Optional[torch.device] = None) -> str:
    """What :func:`run_ladder` would do here, without running anything (``gputrain bench --dry-run``)."""
    dev = dev or device()
    lines = [
        f"speed ladder on {device_name(dev)} ({dev.type}): GPT {cfg.n_layer} x "
        f"{cfg.n_embd}, {cfg.n_head} heads, T={cfg.block_size}, vocab {cfg.vocab_size}; "
        f"{cfg.warmup} warm-up + {cfg.rounds} rounds x {cfg.steps} steps per rung, cap {cfg.max_seconds:.0f} s"
    ]
    for i, (name, label, why) in enumerate(RUNGS, 1):
        skip = skip_reason(name, cfg, dev)
        lines.append(f"{i}. {label:<24} {'SKIP: ' + skip if skip else why}")
    return "\n".join(lines)

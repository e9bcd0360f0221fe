"""What a ladder run measured, one row per rung, and the text table the command line prints."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional


@dataclass
class LadderResult:
    """What :func:`run_ladder` measured: one row per rung, plus where and against which peaks."""

    config: dict
    device: str
    device_type: str
    flops_per_token: int  # 6N + 12LTC of the unpadded model (PaLM appendix B)
    n_params: int  # N: weights of the linear layers, tied head once
    peak_datasheet: Optional[float]  # FLOP/s, dense bf16 (None on a CPU)
    peak_measured: Optional[float]  # FLOP/s, best matrix product measured here
    peak_measured_source: str
    threads: int
    rows: list[dict] = field(default_factory=list)
    rounds_done: int = 0
    seconds_total: float = 0.0
    notes: list[str] = field(default_factory=list)

    def measured_rows(self) -> list[dict]:
        return [r for r in self.rows if r.get("tokens_per_s")]

    def row(self, name: str) -> dict:
        return next(r for r in self.rows if r["rung"] == name)

    def table(self) -> str:
        """The ladder as a text table: what each rung builds on, tokens/s, speed-ups, MFU, peak memory, notes."""
        c = self.config
        measured = {r["rung"]: r for r in self.measured_rows()}
        base = next(iter(measured.values()), {}).get("tokens_per_s")
        lines = [
            f"speed ladder on {self.device} ({self.device_type}), {self.threads} thread(s): GPT {c['n_layer']} x "
            f"{c['n_embd']}, {c['n_head']} heads, T = {c['block_size']}, vocab {c['vocab_size']}",
            f"{'rung':<26} {'on top of':<12} {'tokens/s':>9} {'x fp32':>6} {'x prev':>6} {'MFU':>6} {'MFU meas':>8} "
            f"{'peak mem':>10}  note",
        ]
        pct = lambda v: f"{v:6.1%}" if v is not None else f"{'n/a':>6}"  # noqa: E731
        for r in self.rows:
            if not r.get("tokens_per_s"):
                lines.append(f"{r['label']:<26} {'':<12} {'-':>9}  skipped: {r['skipped']}")
                continue
            prev = measured.get(r.get("builds_on") or "", {}).get("tokens_per_s")
            over_prev = f"{r['tokens_per_s'] / prev:5.2f}x" if prev else f"{'-':>6}"
            notes = [f"compile {r['compile_seconds']:.1f} s"] if r.get("compile_seconds") is not None else []
            if r.get("left_out_of_base"):
                notes.append("later rungs leave it out")
            lines.append(
                f"{r['label']:<26} {r.get('builds_on') or '-':<12} {r['tokens_per_s']:9,.0f} "
                f"{r['tokens_per_s'] / base:5.2f}x {over_prev} "
                f"{pct(r['mfu'])} {pct(r['mfu_measured']):>8} {_bytes_text(r.get('peak_memory_bytes'))}  "
                + "; ".join(notes)
            )
        lines.append(
            f"{self.rounds_done} of {c['rounds']} rounds of {c['steps']} steps per rung (each rung's median round); "
            f"{self.seconds_total:.0f} s in all"
        )
        lines += [f"note: {r['label']}: {r['left_out_of_base']}" for r in self.rows if r.get("left_out_of_base")]
        lines += [f"CAPPED: {n}" for n in self.notes]
        return "\n".join(line.rstrip() for line in lines)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "LadderResult":
        """A result read back from its JSON (``read_result(path)["data"]``); extra keys are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def _bytes_text(n: Optional[int]) -> str:
    if not n:
        return f"{'n/a':>10}"
    return f"{n / 2**30:7.2f} GiB" if n >= 2**30 else f"{n / 2**20:7.1f} MiB"

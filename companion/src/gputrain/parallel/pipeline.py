"""Pipeline parallelism: schedules as timelines, the bubble, and a real pipelined run (chapter 8).

A model cut into p stages (consecutive layers on p ranks) works like an
assembly line: the batch is split into m micro-batches, stage s runs the
forward of micro-batch i once stage s-1 hands it over, and the backward flows
the other way.  While the line fills and drains, some stages have nothing to
do: the *bubble*.  With forward and backward each taking one time unit per
stage, both schedules below idle for a fraction

    bubble = (p - 1) / (m + p - 1)

of the time.  They differ in memory: GPipe (Huang et al. 2019) runs all m
forwards before any backward, so each stage holds the activations of m
micro-batches; 1F1B (PipeDream-Flush, Narayanan et al. 2019/2021) starts
backwards as early as it can and alternates one forward with one backward,
so stage s never holds more than p - s.

The schedules here are computed exactly by a small list scheduler: every
stage runs its operations in the schedule's order, each as soon as its input
exists.  :func:`pipeline_check` runs the real thing with
``torch.distributed.pipelining``.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

import matplotlib.pyplot as plt
import torch
import torch.distributed as dist
import torch.nn as nn

from ..model import Block, GPTConfig
from .launch import rank_device


@dataclass(frozen=True)
class Op:
    """One unit of work on one stage: forward ("F"), backward ("B") or weight gradient ("W") of a micro-batch.

    Without "W" ops, "B" is the whole backward; with them (zero-bubble
    schedules) "B" computes only the gradient of the stage's input.
    """

    kind: str  # "F", "B" or "W"
    micro: int  # micro-batch index
    start: int  # time step it begins
    end: int  # time step it ends (exclusive)
    stage: int = 0  # model stage (along the micro-batch's route) this op belongs to


@dataclass
class Timeline:
    """Every stage's operations in time order, as computed by a schedule."""

    name: str
    p: int  # stages
    m: int  # micro-batches
    stages: list[list[Op]]  # stages[s] = operations of stage (device) s, in time order
    v: int = 1  # model chunks per device: a chunk's activations are 1/v of a plain stage's

    @property
    def makespan(self) -> int:
        """Time steps from the first forward to the last backward."""
        return max(op.end for ops in self.stages for op in ops)

    def bubble(self) -> Fraction:
        """Fraction of stage-time spent idle: 1 - busy / (p * makespan)."""
        busy = sum(op.end - op.start for ops in self.stages for op in ops)
        return 1 - Fraction(busy, self.p * self.makespan)

    def in_flight(self, stage: int, t: Optional[float] = None) -> int | list[int]:
        """Micro-batches whose activations ``stage`` holds (forward done, backward not) at time ``t``.

        Without ``t``: the count after every time step, a list of length makespan.
        """
        if t is None:
            return [self.in_flight(stage, k + 1) for k in range(self.makespan)]
        ops = self.stages[stage]
        free = "W" if any(op.kind == "W" for op in ops) else "B"  # W still needs the saved inputs
        held = sum(op.end <= t for op in ops if op.kind == "F") - sum(op.end <= t for op in ops if op.kind == free)
        return held if self.v == 1 else Fraction(held, self.v)

    def peak_in_flight(self) -> list[int]:
        """The most micro-batches each stage ever holds at once."""
        return [max(self.in_flight(s)) for s in range(self.p)]

    def bubble_time(self, stage: int = 0) -> int:
        """Idle time of one device between the first op and the makespan: makespan - its work."""
        return self.makespan - sum(op.end - op.start for op in self.stages[stage])

    def busy(self, stage: int, t: int) -> Optional[Op]:
        """The operation ``stage`` runs during time step ``t`` (None if idle)."""
        return next((op for op in self.stages[stage] if op.start <= t < op.end), None)


def bubble_fraction(p: int, m: int) -> Fraction:
    """The textbook bubble (p - 1) / (m + p - 1), exact."""
    _check(p, m)
    return Fraction(p - 1, m + p - 1)


def _check(p: int, m: int) -> None:
    if p < 1 or m < 1:
        raise ValueError(f"need at least one stage and one micro-batch, got p={p}, m={m}")


def _simulate(name: str, orders: list[list[tuple[str, int]]], m: int, forward: int, backward: int) -> Timeline:
    """Run each stage's ordered ("F"/"B", micro) list as early as dependencies allow (stage = device)."""
    routed = [[(kind, i, s) for kind, i in order] for s, order in enumerate(orders)]
    return run_orders(name, routed, m, {"F": forward, "B": backward}, len(orders))


def _deps(kind: str, i: int, k: int, n_stages: int) -> list[tuple[str, int, int]]:
    """What op (kind, stage k, micro i) waits for: F the previous stage's F; B its F and the next B; W its B."""
    return {
        "F": [("F", k - 1, i)] if k > 0 else [],
        "B": [("F", k, i)] + ([("B", k + 1, i)] if k < n_stages - 1 else []),
        "W": [("B", k, i)],
    }[kind]


def run_orders(
    name: str, orders: list[list[tuple[str, int, int]]], m: int, durations: dict[str, int], n_stages: int, v: int = 1
) -> Timeline:
    """List-schedule each device's ordered ``(kind, micro, stage[, paired])`` ops as early as dependencies allow.

    ``stage`` is the op's position along its micro-batch's route through the
    ``n_stages`` model stages (which device runs it is the caller's business:
    interleaving and DualPipe put several stages on one device).  F needs the
    previous stage's F; B needs its own F and the next stage's B; W its own B.
    An F marked ``paired`` runs as one overlapped chunk with the op after it
    (DualPipe's F&B): it waits for that op's inputs too.
    """
    p = len(orders)
    done: dict[tuple[str, int, int], int] = {}  # (kind, stage, micro) -> end time
    clock, nxt = [0] * p, [0] * p  # when each device is free again; index of its next op
    stages: list[list[Op]] = [[] for _ in range(p)]
    while any(nxt[d] < len(orders[d]) for d in range(p)):
        progressed = False
        for d in range(p):
            if nxt[d] == len(orders[d]):
                continue
            kind, i, k, *paired = orders[d][nxt[d]]
            deps = _deps(kind, i, k, n_stages)
            if paired and paired[0]:  # an overlapped F&B pair starts when both halves' inputs exist
                deps += _deps(*orders[d][nxt[d] + 1][:3], n_stages)  # a backward of another micro-batch
            if not all(dep in done for dep in deps):
                continue
            start = max([clock[d]] + [done[dep] for dep in deps])
            end = start + durations[kind]
            stages[d].append(Op(kind, i, start, end, k))
            done[(kind, k, i)], clock[d] = end, end
            nxt[d] += 1
            progressed = True
        if not progressed:
            raise RuntimeError(f"schedule {name} deadlocks")  # an order that waits on itself
    return Timeline(name, p, m, stages, v)


def schedule_gpipe(p: int, m: int, forward: int = 1, backward: int = 1) -> Timeline:
    """GPipe: every stage runs all m forwards, then all m backwards (Huang et al. 2019)."""
    _check(p, m)
    order = [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    return _simulate("GPipe", [order] * p, m, forward, backward)


def schedule_1f1b(p: int, m: int, forward: int = 1, backward: int = 1) -> Timeline:
    """1F1B: p-s-1 warm-up forwards on stage s, then one forward / one backward, then the rest."""
    _check(p, m)
    orders = []
    for s in range(p):
        warmup = min(p - s - 1, m)
        order = [("F", i) for i in range(warmup)]
        for i in range(m - warmup):
            order += [("F", warmup + i), ("B", i)]
        order += [("B", i) for i in range(m - warmup, m)]
        orders.append(order)
    return _simulate("1F1B", orders, m, forward, backward)


def draw_timeline(ax, timeline: Timeline, upto: Optional[float] = None, label: bool = True) -> None:
    """Draw ``timeline`` on a matplotlib axis: one row per stage, forwards blue, backwards orange, W green.

    ``upto`` draws only what has started before that time (for animations).
    """
    cmaps = {"F": plt.get_cmap("Blues"), "B": plt.get_cmap("Oranges"), "W": plt.get_cmap("Greens")}
    for s, ops in enumerate(timeline.stages):
        for op in ops:
            if upto is not None and op.start >= upto:
                continue
            end = op.end if upto is None else min(op.end, upto)
            shade = 0.35 + 0.5 * op.micro / max(1, timeline.m - 1)
            color = cmaps[op.kind](shade)
            ax.add_patch(plt.Rectangle((op.start, s - 0.4), end - op.start, 0.8, color=color, ec="white"))
            if label and end - op.start >= 0.6:
                ax.text(
                    (op.start + end) / 2,
                    s,
                    f"{op.micro}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if shade > 0.6 else "black",
                )
    ax.set_xlim(0, timeline.makespan)
    ax.set_ylim(timeline.p - 0.5, -0.5)  # stage 0 on top
    ax.set_yticks(range(timeline.p), [f"stage {s}" for s in range(timeline.p)])
    ax.set_xlabel("time (one forward = 1 unit)")
    ax.set_title(
        f"{timeline.name}: p={timeline.p}, m={timeline.m}, bubble {float(timeline.bubble()):.0%}, "
        f"peak in flight {max(timeline.peak_in_flight())}"
    )


def split_layers(n_layers: int, stages: int) -> list[range]:
    """Consecutive layer ranges for each stage, as even as possible."""
    if stages < 1:
        raise ValueError(f"need at least one pipeline stage, got {stages}")
    if stages > n_layers:
        raise ValueError(
            f"cannot split {n_layers} layers into {stages} pipeline stages: every stage needs "
            f"at least one layer; use at most {n_layers} stages"
        )
    base, extra = divmod(n_layers, stages)
    out, start = [], 0
    for s in range(stages):
        size = base + (1 if s < extra else 0)
        out.append(range(start, start + size))
        start += size
    return out


# --- per-rank function for gputrain.parallel.launch ------------------------------------------


def _stack(n_layers: int, n_embd: int, seed: int) -> nn.Sequential:
    """The model both runs share: ``n_layers`` GPT blocks on a (B, T, C) residual stream."""
    torch.manual_seed(seed)
    cfg = GPTConfig(n_embd=n_embd, n_head=4, block_size=64)
    return nn.Sequential(*[Block(cfg) for _ in range(n_layers)])


def pipeline_check(
    n_layers: int = 4,
    n_embd: int = 32,
    batch: int = 8,
    seq: int = 16,
    microbatches: int = 4,
    schedule: str = "1F1B",
    seed: int = 0,
) -> dict:
    """Train step of a block stack pipelined over all ranks vs the same stack on one process.

    Each rank keeps its consecutive blocks (:func:`split_layers`) and runs
    ``torch.distributed.pipelining``'s ``Schedule1F1B`` or ``ScheduleGPipe``
    over ``microbatches`` micro-batches; every rank also runs the whole model
    on the whole batch.  Returns the loss of both and the largest gradient
    difference over this rank's parameters.
    """
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    rank, world, dev = dist.get_rank(), dist.get_world_size(), rank_device()
    if batch % microbatches:
        raise ValueError(f"batch {batch} must be a multiple of microbatches {microbatches}")
    full = _stack(n_layers, n_embd, seed).to(dev)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, seq, n_embd, generator=g).to(dev)  # (B, T, C)
    target = torch.randn(batch, seq, n_embd, generator=g).to(dev)  # (B, T, C)

    def loss_fn(out: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        return (out - tgt).square().mean()

    ref_loss = loss_fn(full(x), target)  # the single-process reference: whole model, whole batch
    ref_loss.backward()

    mine = split_layers(n_layers, world)[rank]
    part = _stack(n_layers, n_embd, seed).to(dev)[mine.start : mine.stop]  # same weights, my blocks only
    stage = PipelineStage(part, rank, world, dev)
    kind = {"1F1B": Schedule1F1B, "GPipe": ScheduleGPipe}[schedule]
    runner = kind(stage, n_microbatches=microbatches, loss_fn=loss_fn)  # averages micro-batch grads
    losses: list[torch.Tensor] = []
    if rank == 0:
        runner.step(x)
    elif rank == world - 1:
        runner.step(target=target, losses=losses)
    else:
        runner.step()
    pipe_loss = torch.stack(losses).mean().item() if losses else None
    ref_params = dict(full[mine.start : mine.stop].named_parameters())
    grad_err = max((p.grad - ref_params[name].grad).abs().max().item() for name, p in part.named_parameters())
    return {
        "rank": rank,
        "layers": list(mine),
        "ref_loss": ref_loss.item(),
        "pipe_loss": pipe_loss,
        "max_grad_diff": grad_err,
        "params": sum(p.numel() for p in part.parameters()),
    }

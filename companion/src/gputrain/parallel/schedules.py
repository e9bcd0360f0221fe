"""Pipeline schedules that shrink the bubble: interleaved 1F1B, zero-bubble ZB-H1, DualPipe (chapter 8b).

All three are orders of operations per device, run by the exact list
scheduler :func:`gputrain.parallel.pipeline.run_orders` (each op starts as
soon as its inputs exist and its device is free).

* **Interleaved 1F1B** (Narayanan et al. 2021): each device holds v model
  chunks (device d has stages d, d+p, d+2p, ...).  A micro-batch crosses
  the devices v times, but each crossing is v times shorter, so the fill and
  drain shrink: bubble / ideal time = (p - 1) / (v·m).
* **ZB-H1** (Qi et al. 2024, *Zero Bubble Pipeline Parallelism*): the
  backward is split into B (the gradient of the stage's *input*, which the
  previous stage is waiting for) and W (the gradient of the *weights*, which
  nobody waits for).  Deferring W fills the drain: the bubble falls from
  (p-1)(F+B+W) to (p-1)(F+B-W) (with B = input gradient only), while no
  device holds more micro-batches than 1F1B's first stage (p).
* **DualPipe** (DeepSeek-AI 2024, the V3 report): micro-batches enter from
  both ends of the pipeline; device d holds stage d of one copy of the model
  and stage p-1-d of a second copy.  The order below follows the eight steps
  of DeepSeek's open-source DualPipe.
"""

from __future__ import annotations

from fractions import Fraction

from .pipeline import Timeline, _check, run_orders


def check_virtual_stages(p: int, v: int, n_layers: int | None = None) -> None:
    """Interleaving needs v >= 1 and, given ``n_layers``, at least one layer per virtual stage."""
    if v < 1:
        raise ValueError(f"need at least one model chunk per device, got v={v}")
    if n_layers is not None and p * v > n_layers:
        raise ValueError(
            f"{p} devices x {v} virtual stages = {p * v} virtual stages, more than the {n_layers} "
            f"layers: every virtual stage needs a layer; use v <= {n_layers // p}"
        )


def schedule_interleaved(
    p: int, m: int, v: int, forward: int = 1, backward: int = 2, n_layers: int | None = None
) -> Timeline:
    """Megatron's interleaved 1F1B: v chunks per device; ``forward``/``backward`` are per chunk.

    Forwards run in groups of p micro-batches per chunk (chunk 0 for micro-
    batches 0..p-1, then chunk 1 for them, ...); backwards likewise with the
    chunks in reverse.  Device d warms up with 2(p-d-1) + (v-1)p forwards.
    Needs m to be a multiple of p, as Megatron does.
    """
    _check(p, m)
    check_virtual_stages(p, v, n_layers)
    if m % p:
        raise ValueError(f"interleaved 1F1B needs micro-batches ({m}) to be a multiple of the devices ({p})")
    total = m * v

    def unit(k: int, backward_pass: bool) -> tuple[int, int]:  # k-th virtual micro-batch -> (micro, chunk)
        chunk = (k // p) % v
        return (k // (p * v)) * p + k % p, (v - 1 - chunk if backward_pass else chunk)

    orders = []
    for d in range(p):
        warmup = min(2 * (p - d - 1) + (v - 1) * p, total)
        fw = [("F", *unit(k, False)) for k in range(total)]
        bw = [("B", *unit(k, True)) for k in range(total)]
        order = fw[:warmup]
        for j in range(total - warmup):
            order += [fw[warmup + j], bw[j]]
        order += bw[total - warmup :]
        orders.append([(kind, i, c * p + d) for kind, i, c in order])  # chunk c of device d = stage c·p + d
    return run_orders(f"interleaved 1F1B (v={v})", orders, m, {"F": forward, "B": backward}, p * v, v)


def schedule_zb_h1(p: int, m: int, forward: int = 1, backward: int = 1, weight: int = 1) -> Timeline:
    """ZB-H1: 1F1B's forwards and input-gradient backwards B, with each W deferred to fill the drain.

    Stage s warms up with p-1-s forwards like 1F1B; in the steady phase it runs
    F, B and the W of the micro-batch s steps older (so at most p micro-batches
    are held, as on 1F1B's first stage); the drain runs the remaining B's and
    W's alternately, and the last W's at the end.
    """
    _check(p, m)
    orders = []
    for s in range(p):
        warmup = min(p - 1 - s, m)
        lag = min(s, m)  # W's held back, filling the drain bubble
        order = [("F", i) for i in range(warmup)]
        w = 0
        for i in range(m - warmup):
            order += [("F", warmup + i), ("B", i)]
            if i >= lag:
                order.append(("W", w))
                w += 1
        for i in range(m - warmup, m):
            order.append(("B", i))
            if w < m:
                order.append(("W", w))
                w += 1
        order += [("W", j) for j in range(w, m)]
        orders.append([(kind, i, s) for kind, i in order])
    return run_orders("ZB-H1", orders, m, {"F": forward, "B": backward, "W": weight}, p)


def _dualpipe_order(p: int, m: int, d: int) -> list[tuple[str, int, int]]:
    """Device d's ops in DualPipe's eight steps; phase 0 is the direction that enters nearer to d."""
    half, hr = p // 2, min(d, p - 1 - d)
    direction = (0, 1) if d < half else (1, 0)  # direction of phase 0 and phase 1 on this device
    nxt = {(k, ph): 0 for k in "FB" for ph in (0, 1)}
    waiting: list[tuple[str, int, int]] = []  # deferred W's, first in first out
    order: list[tuple[str, int, int]] = []

    def op(kind: str, ph: int) -> tuple[str, int, int]:
        j = nxt[(kind, ph)]
        nxt[(kind, ph)] += 1
        dr = direction[ph]
        return kind, j + dr * (m // 2), (d if dr == 0 else p - 1 - d)  # micro ids: direction 1 after 0

    def F(ph: int, paired: bool = False) -> None:  # paired: overlapped with the backward after it
        order.append((*op("F", ph), paired))

    def B(ph: int, zb: bool = False) -> None:  # zb: defer this W to a later weight chunk
        b = op("B", ph)
        order.append(b)
        (waiting if zb else order).append(("W", b[1], b[2]))

    def W() -> None:
        order.append(waiting.pop(0))

    for _ in range((half - hr - 1) * 2):  # 1: nF0
        F(0)
    for _ in range(hr + 1):  # 2: nF0F1
        F(0), F(1)
    for _ in range(half - hr - 1):  # 3: nB1W1F1 (zero bubble)
        B(1, zb=True), W(), F(1)
    for _ in range(m // 2 - p + hr + 1):  # 4: nF0B1F1B0, the main step (F and B pairs overlap on GPUs)
        F(0, paired=True), B(1), F(1, paired=True), B(0)
    for _ in range(half - hr - 1):  # 5: nB1F1B0
        B(1), F(1, paired=True), B(0)
    zb = False
    for i in range(hr + 1):  # 6: nB1B0, the second half with zero bubble
        zb = zb or (i == (hr + 1) // 2 and hr % 2 == 1)
        B(1, zb)
        zb = zb or (i == (hr + 1) // 2 and hr % 2 == 0)
        B(0, zb)
    for _ in range(half - hr - 1):  # 7: nWB0 (zero bubble)
        W(), B(0, zb=True)
    while waiting:  # 8: nW
        W()
    return order


def schedule_dualpipe(p: int, m: int, forward: int = 1, backward: int = 1, weight: int = 1) -> Timeline:
    """DeepSeek's DualPipe on p devices (p even) with m micro-batches, m/2 from each end (m >= 2p, even).

    Micro-batches 0..m/2-1 enter device 0 and run stages 0..p-1 on devices
    0..p-1; micro-batches m/2..m-1 enter device p-1 and run stage k on device
    p-1-k (the second copy of the model).
    """
    _check(p, m)
    if p % 2 or m % 2 or m < 2 * p:
        raise ValueError(f"DualPipe needs an even number of devices and an even m >= 2p; got p={p}, m={m}")
    orders = [_dualpipe_order(p, m, d) for d in range(p)]
    # run_orders follows each micro-batch's own route: stage k of direction 1 lives on device p-1-k
    return run_orders("DualPipe", orders, m, {"F": forward, "B": backward, "W": weight}, p)


def bubble_formula(schedule: str, p: int, m: int = 1, v: int = 1, F: int = 1, B: int = 1, W: int = 1) -> Fraction:
    """Idle time per device from the papers, with F, B (input gradient) and W per stage (per chunk if v > 1).

    DeepSeek-V3's table writes B for the *full* backward (our B + W) and F&B for an
    overlapped forward-backward pair; without overlap F&B = F + B + W.
    """
    full = B + W
    formulas = {
        "1F1B": (p - 1) * (F + full),
        "interleaved": (p - 1) * (F + full),
        "ZB-H1": (p - 1) * (F + full - 2 * W),
        "DualPipe": (p // 2 - 1) * ((F + full) + full - 3 * W),
    }
    return Fraction(formulas[schedule])

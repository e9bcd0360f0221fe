"""The roofline checked on this CPU: three real operations timed against the times the roofs predict."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .cost import OpCost, _check_sizes
from .machine import Machine, _interleaved_medians, _Probes, on_a_cpu
from .operations import adamw_step, add, matmul

CPU_TOLERANCE = 2.0


@dataclass(frozen=True)
class Agreement:
    """One operation timed on this CPU against the roofline's prediction."""

    op: OpCost
    measured: float  # median seconds
    predicted: float  # Machine.predict_seconds
    bound: str  # the roof that decides the prediction

    @property
    def ratio(self) -> float:
        """Measured over predicted time: 1 is perfect agreement, above 1 slower than the roofs allow."""
        return self.measured / self.predicted

    def within(self, factor: float = CPU_TOLERANCE) -> bool:
        """Whether measured and predicted time agree within ``factor`` either way."""
        return 1 / factor <= self.ratio <= factor


def check_cpu_roofline(
    threads: int = 1,
    rounds: int = 7,
    copy_bytes: int = 1 << 26,
    probe_n: int = 512,
    add_elements: int = 1 << 23,
    adamw_params: int = 1 << 23,
    matmul_shape: tuple[int, int, int] = (384, 1024, 768),
) -> tuple[Machine, list[Agreement]]:
    """Measure this CPU's roofline and time three operations against it (chapter 11, "The roofline").

    The operations: an elementwise add of ``add_elements`` fp32 values and a
    fused ``torch.optim.AdamW`` step on ``adamw_params`` parameters (both
    memory-bound), and an fp32 matmul of ``matmul_shape`` (m, k, n), not the
    probe's square (compute-bound).  Each round times the two roof probes and
    the three operations one after another, so a neighbour's load slows
    roofs and operations alike; every figure is the median over ``rounds``.
    One thread by default: on a small shared CPU a two-thread product waits
    for whichever core a neighbour holds, and the roofs stop describing it.
    Returns the measured machine and one :class:`Agreement` per operation;
    :data:`CPU_TOLERANCE` is how far they were seen to disagree.
    """
    _check_sizes(add_elements=add_elements, adamw_params=adamw_params)
    m, k, n = matmul_shape
    probes = _Probes(copy_bytes, probe_n)
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(add_elements, generator=gen), torch.randn(add_elements, generator=gen)
    z = torch.empty_like(x)
    a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
    c = torch.empty(m, n)
    param = torch.nn.Parameter(torch.randn(adamw_params, generator=gen))
    param.grad = torch.randn(adamw_params, generator=gen) * 1e-3
    opt = torch.optim.AdamW([param], lr=1e-4, fused=True)  # one pass over p, g, m, v: the counted traffic
    ops = {
        "add": (on_a_cpu(add(add_elements), 4 * add_elements), lambda: torch.add(x, y, out=z)),
        "adamw": (adamw_step(adamw_params), opt.step),
        "matmul": (matmul(m, k, n, itemsize=4), lambda: torch.mm(a, b, out=c)),
    }
    runs = {"copy": probes.copy, "probe": probes.matmul, **{key: fn for key, (_, fn) in ops.items()}}
    med = _interleaved_medians(runs, rounds, threads)
    machine = probes.machine(med["copy"], med["probe"], threads)
    rows = [Agreement(op, med[key], machine.predict_seconds(op), machine.bound(op)) for key, (op, _) in ops.items()]
    return machine, rows

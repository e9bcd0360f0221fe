"""A real pipeline with a split backward: ZB-H1 against 1F1B on processes (chapter 8b).

Each rank is one stage: a stack of Linear + GELU layers.  The order of
operations comes from the schedule generators (:func:`schedule_1f1b`,
:func:`gputrain.parallel.schedules.schedule_zb_h1`), so what runs is
exactly what the timelines draw.

The zero-bubble trick is the split backward.  For a linear layer
``Y = X W^T + b`` the backward has two independent parts: dX = dY W (the
next stage upstream waits for it) and dW = dY^T X, db = sum dY (nobody waits
for them).  **B** asks autograd for the gradients of the stage's input and of
every linear layer's output, and nothing else: ``torch.autograd.grad`` then
skips the weight products.  **W**, later, forms dW and db of each layer from
the stored X and dY: two matrix products per layer, no graph needed.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from .launch import rank_device
from .pipeline import schedule_1f1b
from .schedules import schedule_zb_h1


def _stage(width: int, layers: int, stage: int, seed: int) -> nn.ModuleList:
    torch.manual_seed(seed + stage)
    return nn.ModuleList(nn.Linear(width, width) for _ in range(layers)).double().to(rank_device())


def _forward(stage: nn.ModuleList, x: torch.Tensor) -> tuple[torch.Tensor, list, list]:
    """Run the stage, keeping each linear layer's input X and output Y (the W pass needs X and dY)."""
    xs, ys = [], []
    for lin in stage:
        xs.append(x)
        y = lin(x)  # (b, width)
        ys.append(y)
        x = F.gelu(y)
    return x, xs, ys


def run_schedule(
    name: str = "ZB-H1", microbatches: int = 4, width: int = 16, layers: int = 2, batch: int = 8, seed: int = 0
) -> dict:
    """Train step of a 2+ stage MLP pipeline under ``name`` ("1F1B" or "ZB-H1"); returns grads and memory.

    With "1F1B" the backward is whole (B computes input and weight gradients
    together); with "ZB-H1" B computes the input gradient only and W the
    weight gradients later.  Returns this rank's parameter gradients, the
    peak number of micro-batches whose activations it held, and its op order.
    """
    p, s, dev = dist.get_world_size(), dist.get_rank(), rank_device()
    m = microbatches
    timeline = schedule_zb_h1(p, m) if name == "ZB-H1" else schedule_1f1b(p, m)
    order = [(op.kind, op.micro) for op in sorted(timeline.stages[s], key=lambda op: op.start)]
    stage = _stage(width, layers, s, seed)
    g = torch.Generator().manual_seed(seed + 99)
    xs_all = torch.randn(m, batch // m, width, generator=g, dtype=torch.float64)  # (m, b, width)
    targets = torch.randn(m, batch // m, width, generator=g, dtype=torch.float64)
    held: dict[int, dict] = {}  # micro-batch -> what its backward still needs
    peak, sends = 0, []
    for kind, i in order:
        if kind == "F":
            held[i] = _forward_step(stage, xs_all[i], s, p, dev, sends)
            peak = max(peak, len(held))
        elif kind == "B":
            _backward_step(stage, held[i], targets[i], s, p, batch, name == "ZB-H1", sends)
            if name != "ZB-H1":
                del held[i]
        else:  # W: dW = dY^T X and db = sum(dY) per layer
            h = held.pop(i)
            wg = [t for x, dy in zip(h["xs"], h["dys"]) for t in (dy.T @ x.detach(), dy.sum(0))]
            _accumulate(stage.parameters(), wg)
    for w in sends:
        w.wait()
    return {
        "grads": [q.grad.clone() for q in stage.parameters()],
        "peak_in_flight": peak,
        "order": "".join(f"{k}{i}" for k, i in order),
    }


def _forward_step(stage, x0: torch.Tensor, s: int, p: int, dev, sends: list) -> dict:
    """F: the first stage reads its micro-batch, the others receive it; what the backward will need."""
    if s == 0:
        x = x0.to(dev)
    else:
        x = torch.empty(x0.shape, dtype=torch.float64, device=dev)
        dist.recv(x, s - 1)
        x.requires_grad_(True)
    out, xs, ys = _forward(stage, x)
    if s < p - 1:
        sends.append(dist.isend(out.detach().contiguous(), s + 1))  # isend: the peer may be sending too
    return {"x": x, "out": out, "xs": xs, "ys": ys}


def _backward_step(stage, h: dict, target: torch.Tensor, s: int, p: int, batch: int, split: bool, sends: list) -> None:
    """B: the input gradient goes to the previous stage; weight gradients now (1F1B) or kept for W (``split``)."""
    dev = h["out"].device
    if s == p - 1:
        root, grad_out = (h["out"] - target.to(dev)).square().sum() / batch, None
    else:
        grad_out = torch.empty_like(h["out"])
        dist.recv(grad_out, s + 1)
        root = h["out"]
    wanted = ([h["x"]] if s > 0 else []) + (h["ys"] if split else list(stage.parameters()))
    grads = torch.autograd.grad(root, wanted, grad_outputs=grad_out)
    if s > 0:
        sends.append(dist.isend(grads[0].contiguous(), s - 1))
    rest = grads[1:] if s > 0 else grads
    if split:
        h["dys"] = rest  # dY of every layer: all W needs, with the stored X
    else:
        _accumulate(stage.parameters(), rest)


def _accumulate(params, grads) -> None:
    for q, gr in zip(params, grads):
        q.grad = gr.detach().clone() if q.grad is None else q.grad + gr


def zb_check(microbatches: int = 4, width: int = 16, layers: int = 2, batch: int = 8, seed: int = 0) -> dict:
    """Run 1F1B and ZB-H1 on this pipeline, and the whole model on one process; compare the gradients."""
    p, s = dist.get_world_size(), dist.get_rank()
    one = run_schedule("1F1B", microbatches, width, layers, batch, seed)
    zb = run_schedule("ZB-H1", microbatches, width, layers, batch, seed)
    stages = [_stage(width, layers, k, seed) for k in range(p)]  # the whole model on this process
    g = torch.Generator().manual_seed(seed + 99)
    x = torch.randn(microbatches, batch // microbatches, width, generator=g, dtype=torch.float64)
    target = torch.randn(microbatches, batch // microbatches, width, generator=g, dtype=torch.float64)
    out = x.reshape(batch, width).to(rank_device())
    for st in stages:
        out = _forward(st, out)[0]
    ((out - target.reshape(batch, width).to(rank_device())).square().sum() / batch).backward()
    ref = [q.grad for q in stages[s].parameters()]
    diff = lambda a, b: max((u - w).abs().max().item() for u, w in zip(a, b))  # noqa: E731
    return {
        "zb_vs_1f1b": diff(zb["grads"], one["grads"]),
        "1f1b_vs_one_process": diff(one["grads"], ref),
        "peak": {"1F1B": one["peak_in_flight"], "ZB-H1": zb["peak_in_flight"]},
        "order": {"1F1B": one["order"], "ZB-H1": zb["order"]},
    }

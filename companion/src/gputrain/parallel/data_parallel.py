"""Data parallelism for real: Accelerate's DDP, stragglers, FSDP2 sharding (chapter 8).

Per-rank functions for :func:`gputrain.parallel.launch`.  Each one runs the
library path that training actually uses (Accelerate's ``prepare`` wraps the
model in PyTorch's ``DistributedDataParallel``; ``fully_shard`` is FSDP2) and
checks it against one process doing the whole job.
"""

from __future__ import annotations

import copy
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

from ..model import GPT, GPTConfig
from .launch import rank_device


def _tiny_gpt(seed: int, n_layer: int = 2, n_embd: int = 32, block_size: int = 16) -> nn.Module:
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=64, block_size=block_size, n_layer=n_layer, n_head=4, n_embd=n_embd))


def _batch(global_batch: int, seq: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same random token batch on every rank: inputs and next-token targets, (B, T) each."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 64, (global_batch, seq + 1), generator=g)  # (B, T+1)
    return tokens[:, :-1], tokens[:, 1:]


def _flat_grad(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])  # (P,)


def ddp_accelerate_step(global_batch: int = 8, seq: int = 16, seed: int = 0) -> dict:
    """One data-parallel step through Accelerate; check the averaged gradient.

    Accelerate's prepared DataLoader gives each rank its own slice of the
    global batch.  The backward first runs without synchronisation (each rank's
    *local* gradient), then normally, when DDP all-reduces and averages.
    Every rank then gathers every rank's gradient: all equal, and equal to one
    process computing the gradient of the whole batch.
    """
    world, rank = dist.get_world_size(), dist.get_rank()
    if global_batch % world:
        raise ValueError(f"global batch {global_batch} does not split evenly over {world} processes")
    accelerator = Accelerator(cpu=rank_device().type == "cpu")
    x, y = _batch(global_batch, seq, seed)
    model = _tiny_gpt(seed)
    reference = copy.deepcopy(model).to(accelerator.device)  # one process, whole batch
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(TensorDataset(x, y), batch_size=global_batch // world, shuffle=False)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    xb, yb = next(iter(loader))  # (B/N, T): this rank's share

    with accelerator.no_sync(model):  # local gradient only, no communication
        accelerator.backward(model(xb, yb)[1])
    local = _flat_grad(model).clone()  # (P,)
    optimizer.zero_grad()
    loss = model(xb, yb)[1]
    accelerator.backward(loss)  # DDP all-reduces the gradient buckets during backward
    synced = _flat_grad(model)  # (P,)
    every_local = accelerator.gather(local[None])  # (N, P)
    every_synced = accelerator.gather(synced[None])  # (N, P)

    reference(x.to(accelerator.device), y.to(accelerator.device))[1].backward()
    whole = _flat_grad(reference)  # (P,)
    optimizer.step()
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])  # (P,)
    every_weights = accelerator.gather(weights[None])  # (N, P)
    print(
        f"samples {rank * len(xb)}..{(rank + 1) * len(xb) - 1}: loss {loss.item():.4f}, "
        f"local grad norm {local.norm():.5f}, averaged grad norm {synced.norm():.5f}"
    )
    return {
        "world": world,
        "params": synced.numel(),
        "grad_bytes": synced.numel() * synced.element_size(),
        "local_spread": (every_local - every_local[0]).abs().max().item(),
        "synced_spread": (every_synced - every_synced[0]).abs().max().item(),
        "mean_of_locals_err": (every_local.mean(0) - synced).abs().max().item(),
        "whole_batch_err": (synced - whole).abs().max().item(),
        "grad_scale": whole.abs().max().item(),
        "weights_spread_after_step": (every_weights - every_weights[0]).abs().max().item(),
    }


def straggler_steps(slow_rank: int = 1, delay: float = 0.1, steps: int = 4, seed: int = 0) -> dict:
    """Time DDP training steps, first with equal ranks, then with ``slow_rank`` sleeping ``delay`` s per step.

    The sleep stands for a slower GPU, a busy data loader or a noisy neighbour.
    Each rank reports the median time of its whole step, and of the part
    spent before the backward (its own work, where the delay is).
    """
    world, rank = dist.get_world_size(), dist.get_rank()
    if not 0 <= slow_rank < world:
        raise ValueError(f"slow_rank {slow_rank} is not one of the {world} ranks")
    model = nn.parallel.DistributedDataParallel(_tiny_gpt(seed).to(rank_device()))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = _batch(8, 16, seed + rank)
    x, y = x.to(rank_device()), y.to(rank_device())
    out = {}
    for phase, d in (("equal", 0.0), ("one slow", delay)):
        own, total = [], []
        for step in range(steps + 1):  # step 0 warms up
            dist.barrier()  # everyone starts the step together
            t0 = time.perf_counter()
            loss = model(x, y)[1]
            if rank == slow_rank and d:
                time.sleep(d)  # the straggler's extra work
            t1 = time.perf_counter()
            loss.backward()  # all-reduce inside: waits for the slowest rank's gradient
            optimizer.step()
            optimizer.zero_grad()
            if step:
                own.append(t1 - t0)
                total.append(time.perf_counter() - t0)
        out[phase] = {"own": statistics.median(own), "step": statistics.median(total)}
    print(
        f"step {out['equal']['step'] * 1e3:6.1f} ms when all are equal -> "
        f"{out['one slow']['step'] * 1e3:6.1f} ms with rank {slow_rank} slowed by {delay * 1e3:.0f} ms "
        f"(own work {out['one slow']['own'] * 1e3:.1f} ms)"
    )
    return {"rank": rank, **out}


def fsdp_check(
    n_layer: int = 2, n_embd: int = 32, global_batch: int = 8, seq: int = 16, steps: int = 3, seed: int = 0
) -> dict:
    """Train a small GPT with FSDP2 (``fully_shard``) next to an unsharded copy; measure the shards.

    Every block, then the whole model, is wrapped with ``fully_shard``: each
    rank keeps 1/N of every parameter (a DTensor shard), all-gathers a block's
    parameters just before using it and reduce-scatters its gradients after.
    The AdamW states are created on the shards, so they are 1/N too (ZeRO
    stage 3).  The unsharded copy trains on the whole batch in one process;
    the losses must match step by step.
    """
    from torch.distributed.fsdp import fully_shard

    world, rank = dist.get_world_size(), dist.get_rank()
    if global_batch % world:
        raise ValueError(f"global batch {global_batch} does not split evenly over {world} processes")
    dev = rank_device()
    model = _tiny_gpt(seed, n_layer=n_layer, n_embd=n_embd).to(dev)
    reference = copy.deepcopy(model)
    full_bytes = sum(p.numel() * p.element_size() for p in reference.parameters())  # tied weights once
    for block in model.blocks:
        fully_shard(block)  # one all-gather per block: only one block is whole at a time
    fully_shard(model)  # the rest (embeddings, final norm) in the root group
    local_bytes = sum(p.to_local().numel() * p.element_size() for p in model.parameters())

    shard = slice(rank * global_batch // world, (rank + 1) * global_batch // world)
    optimizer, ref_optimizer, losses, ref_losses = _train_beside(
        model, reference, shard, global_batch, seq, steps, seed
    )
    optimizer_bytes = _state_bytes(optimizer, sharded=True)
    ref_optimizer_bytes = _state_bytes(ref_optimizer, sharded=False)
    print(
        f"holds {local_bytes:,} of {full_bytes:,} parameter bytes ({local_bytes / full_bytes:.1%}), "
        f"{optimizer_bytes:,} of {ref_optimizer_bytes:,} AdamW state bytes"
    )
    return {
        "rank": rank,
        "world": world,
        "local_param_bytes": local_bytes,
        "full_param_bytes": full_bytes,
        "local_optimizer_bytes": optimizer_bytes,
        "full_optimizer_bytes": ref_optimizer_bytes,
        "losses": losses,
        "ref_losses": ref_losses,
    }


def _train_beside(model, reference, shard: slice, global_batch: int, seq: int, steps: int, seed: int):
    """AdamW steps on the sharded model (this rank's share of each batch) and on the whole reference copy.

    Returns both optimizers and both per-step losses; the sharded loss is
    averaged over the ranks, so it is the loss of the whole batch.
    """
    dev = next(reference.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    losses, ref_losses = [], []
    for step in range(steps):
        x, y = _batch(global_batch, seq, seed + 100 + step)
        x, y = x.to(dev), y.to(dev)
        loss = model(x[shard], y[shard])[1]  # this rank's share of the batch
        loss.backward()  # reduce-scatter: each rank receives the averaged gradient of its shard
        optimizer.step()
        optimizer.zero_grad()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss, op=dist.ReduceOp.AVG)
        losses.append(mean_loss.item())
        ref_loss = reference(x, y)[1]
        ref_loss.backward()
        ref_optimizer.step()
        ref_optimizer.zero_grad()
        ref_losses.append(ref_loss.item())
    return optimizer, ref_optimizer, losses, ref_losses


def _state_bytes(optimizer: torch.optim.Optimizer, sharded: bool) -> int:
    """Bytes of an optimizer's tensor states (not its scalar step counts): this rank's shards when ``sharded``."""
    return sum(
        (t.to_local() if sharded else t).numel() * t.element_size()
        for state in optimizer.state.values()
        for t in state.values()
        if isinstance(t, torch.Tensor) and t.dim() > 0
    )

"""Ring all-reduce from scratch, the parameter server it replaced, and their traffic (chapter 8).

Data-parallel training ends every step with an *all-reduce*: each of N ranks
holds a gradient of K elements and every rank must end up with their sum.
:func:`ring_all_reduce` does it the way NCCL and gloo do for large tensors
(Patarasuk & Yuan 2009): the ranks form a ring, the tensor is cut into N
chunks, and

1. *reduce-scatter*: in N-1 steps every rank passes one chunk to its right
   neighbour and adds the chunk arriving from its left; afterwards rank r
   holds the complete sum of chunk (r+1) mod N;
2. *all-gather*: in N-1 more steps the finished chunks travel once around the
   ring, overwriting, until every rank has all of them.

Each rank sends 2(N-1) chunks of K/N elements: 2(N-1)/N * K, which is below 2K
however many ranks there are.  A parameter server (everyone sends to one rank,
which sums and sends back) moves the same K per worker but (N-1) * K through
the server, which is the bottleneck.  Both functions count what they send.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist

from .launch import rank_device


@dataclass
class Traffic:
    """What one rank put on and took off the wire during one collective."""

    sent_bytes: int = 0
    received_bytes: int = 0
    messages: int = 0  # point-to-point sends


def chunk_bounds(numel: int, n: int) -> list[tuple[int, int]]:
    """``n`` contiguous ``(start, end)`` slices covering ``numel`` elements, sizes differing by at most 1."""
    if n < 1:
        raise ValueError(f"world size must be >= 1, got {n}")
    if numel < n:
        raise ValueError(
            f"a tensor of {numel} elements cannot be cut into {n} ring chunks; "
            f"use a tensor with at least world_size={n} elements (or dist.all_reduce)"
        )
    base, extra = divmod(numel, n)
    bounds, start = [], 0
    for i in range(n):
        end = start + base + (1 if i < extra else 0)  # the first `extra` chunks take one more
        bounds.append((start, end))
        start = end
    return bounds


def ring_traffic_bytes(numel: int, n: int, itemsize: int) -> float:
    """Bytes each rank sends (and receives) in a ring all-reduce: 2(N-1)/N * K."""
    if n < 1:
        raise ValueError(f"world size must be >= 1, got {n}")
    return 2 * (n - 1) / n * numel * itemsize


def parameter_server_traffic_bytes(numel: int, n: int, itemsize: int) -> float:
    """Bytes the server receives (and sends) when N-1 workers all-reduce through it: (N-1) * K."""
    if n < 1:
        raise ValueError(f"world size must be >= 1, got {n}")
    return (n - 1) * numel * itemsize


def ring_all_reduce_time(nbytes: float, n: int, bandwidth: float, latency: float = 0.0) -> float:
    """Seconds for a ring all-reduce of ``nbytes`` over links of ``bandwidth`` bytes/s per direction.

    Each of the 2(N-1) steps moves one chunk of nbytes/N and pays ``latency`` once.
    """
    if n < 1 or bandwidth <= 0:
        raise ValueError(f"need n >= 1 and bandwidth > 0, got n={n}, bandwidth={bandwidth}")
    return ring_traffic_bytes(nbytes, n, 1) / bandwidth + 2 * (n - 1) * latency


def _exchange(send: torch.Tensor, recv: torch.Tensor, right: int, left: int, group) -> None:
    """Send ``send`` to the right neighbour while receiving ``recv`` from the left one."""
    ops = [
        dist.P2POp(dist.isend, send, group=group, group_peer=right),
        dist.P2POp(dist.irecv, recv, group=group, group_peer=left),
    ]
    for work in dist.batch_isend_irecv(ops):  # posted together: nobody waits for anybody first
        work.wait()


def _count(traffic: Traffic, out: torch.Tensor, recv: torch.Tensor, item: int, trace, flat) -> None:
    traffic.sent_bytes += out.numel() * item
    traffic.received_bytes += recv.numel() * item
    traffic.messages += 1
    if trace is not None:
        trace.append(flat.detach().clone().cpu())


def ring_all_reduce(
    tensor: torch.Tensor, group: Optional[dist.ProcessGroup] = None, trace: Optional[list] = None
) -> Traffic:
    """Sum ``tensor`` over all ranks of ``group`` in place, with send/recv around a ring.

    Gives the same result as ``dist.all_reduce(tensor, group=group)`` (up to
    float rounding: the additions happen in another order).  Works for any
    world size and any length of at least world-size elements.  Returns the
    :class:`Traffic` of this rank.  ``trace``, if given, receives a copy of
    the tensor after every step (to watch the algorithm work).  Explained in chapter 8.
    """
    n, r = dist.get_world_size(group), dist.get_rank(group)
    bounds = chunk_bounds(tensor.numel(), n)
    traffic = Traffic()
    if n == 1:
        return traffic
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.contiguous().view(-1)  # (K,)
    right, left = (r + 1) % n, (r - 1) % n
    item = flat.element_size()
    buffer = torch.empty(max(e - s for s, e in bounds), dtype=flat.dtype, device=flat.device)

    def chunk(i: int) -> torch.Tensor:
        s, e = bounds[i % n]
        return flat[s:e]  # a view: writing it writes the tensor

    # 1. reduce-scatter: after step s, the chunk received has s+2 ranks' contributions
    for step in range(n - 1):
        out, inc = chunk(r - step), chunk(r - step - 1)
        recv = buffer[: inc.numel()]
        _exchange(out, recv, right, left, group)
        inc += recv  # add the left neighbour's partial sum to ours
        _count(traffic, out, recv, item, trace, flat)
    # rank r now owns the finished chunk (r + 1) mod n
    # 2. all-gather: pass finished chunks around once, overwriting
    for step in range(n - 1):
        out, inc = chunk(r + 1 - step), chunk(r - step)
        recv = buffer[: inc.numel()]
        _exchange(out, recv, right, left, group)
        inc.copy_(recv)
        _count(traffic, out, recv, item, trace, flat)
    if flat.data_ptr() != tensor.data_ptr():  # we worked on a contiguous copy
        tensor.copy_(flat.view_as(tensor))
    return traffic


def parameter_server_all_reduce(
    tensor: torch.Tensor, group: Optional[dist.ProcessGroup] = None, server: int = 0
) -> Traffic:
    """Sum ``tensor`` over ``group`` through one server rank: gather, add, send back.

    The naive scheme the ring replaced.  Returns this rank's :class:`Traffic`;
    the server's grows as (N-1) * K.  Explained in chapter 8.
    """
    n, r = dist.get_world_size(group), dist.get_rank(group)
    if not 0 <= server < n:
        raise ValueError(f"server rank {server} is not in a group of {n} ranks")
    traffic, nbytes = Traffic(), tensor.numel() * tensor.element_size()
    if n == 1:
        return traffic
    if r == server:
        incoming = torch.empty_like(tensor)
        for worker in (w for w in range(n) if w != server):  # one at a time through one network port
            dist.recv(incoming, group=group, group_src=worker)
            tensor += incoming
            traffic.received_bytes += nbytes
        for worker in (w for w in range(n) if w != server):
            dist.send(tensor, group=group, group_dst=worker)
            traffic.sent_bytes += nbytes
            traffic.messages += 1
    else:
        dist.send(tensor, group=group, group_dst=server)
        dist.recv(tensor, group=group, group_src=server)
        traffic.sent_bytes, traffic.received_bytes, traffic.messages = nbytes, nbytes, 1
    return traffic


# --- per-rank functions for gputrain.parallel.launch ------------------------------------------


def traffic_survey(sizes: list[int], numel: int, seed: int = 0) -> list[dict]:
    """Run the ring and the parameter server on groups of each size in ``sizes``; check and count.

    Launch on ``max(sizes)`` processes.  For every size n the first n ranks form
    a group, all-reduce a fresh random tensor of ``numel`` float32 elements with
    :func:`ring_all_reduce`, with :func:`parameter_server_all_reduce` and with
    ``dist.all_reduce``, assert the three agree, and report every rank's
    traffic.  Rank 0 returns one dict per size; other ranks return ``[]``.
    """
    world, rank = dist.get_world_size(), dist.get_rank()
    if max(sizes) > world:
        raise ValueError(f"sizes go up to {max(sizes)} but only {world} processes were launched")
    rows = []
    for n in sizes:
        group = dist.new_group(list(range(n)))  # every rank must take part in creating it
        if rank >= n:
            continue
        g = torch.Generator().manual_seed(seed + 1000 * n + rank)
        x = torch.randn(numel, generator=g).to(rank_device())  # (K,) this rank's "gradient"
        expected, ring, ps = x.clone(), x.clone(), x.clone()
        dist.all_reduce(expected, group=group)
        ring_t = ring_all_reduce(ring, group=group)
        ps_t = parameter_server_all_reduce(ps, group=group)
        torch.testing.assert_close(ring, expected, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ps, expected, rtol=1e-5, atol=1e-5)
        counts = [None] * n
        dist.all_gather_object(counts, (ring_t, ps_t), group=group)
        if rank == 0:
            rows.append(
                {
                    "n": n,
                    "numel": numel,
                    "bytes": numel * x.element_size(),
                    "ring_sent": [c[0].sent_bytes for c in counts],
                    "ring_received": [c[0].received_bytes for c in counts],
                    "ps_sent": [c[1].sent_bytes for c in counts],
                    "ps_received": [c[1].received_bytes for c in counts],
                }
            )
    return rows


def ring_trace() -> list[list[list[int]]]:
    """Watch a ring all-reduce on a tensor of N elements (one per chunk) where rank r starts with 2**r.

    A sum of distinct powers of two says exactly whose contributions it
    holds.  Returns, on every rank, ``states[step][rank][chunk]`` for the
    start and after each of the 2(N-1) steps.
    """
    n, rank = dist.get_world_size(), dist.get_rank()
    x = torch.full((n,), 2**rank, dtype=torch.int64, device=rank_device())  # (N,)
    trace = [x.clone().cpu()]
    ring_all_reduce(x, trace=trace)
    everyone = [None] * n
    dist.all_gather_object(everyone, [t.tolist() for t in trace])
    return [[everyone[r][step] for r in range(n)] for step in range(len(trace))]


def bandwidth_survey(sizes_bytes: list[int], repeats: int = 5) -> list[dict]:
    """Time ``dist.all_reduce`` and :func:`ring_all_reduce` on float32 tensors of each size.

    Reports the median time and the *bus bandwidth* 2(N-1)/N * bytes / time,
    the bytes each rank actually moved per second (the convention of
    nccl-tests), so runs with different N compare directly.
    """
    n = dist.get_world_size()
    rows = []
    for nbytes in sizes_bytes:
        x = torch.ones(max(n, nbytes // 4), device=rank_device())  # (K,) float32
        row = {"bytes": x.numel() * 4, "n": n}
        for name, op in (("dist.all_reduce", dist.all_reduce), ("ring_all_reduce", ring_all_reduce)):
            op(x)  # warm-up: connections, buffers
            times = []
            for _ in range(repeats):
                dist.barrier()
                if x.is_cuda:
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                op(x)
                if x.is_cuda:
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            # the collective is as slow as its slowest rank: take the max over ranks
            slowest = torch.tensor(times, dtype=torch.float64, device=x.device)  # (repeats,)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            t = statistics.median(slowest.tolist())
            row[name] = {"seconds": t, "bus_GBps": ring_traffic_bytes(x.numel(), n, 4) / t / 1e9}
        rows.append(row)
    return rows

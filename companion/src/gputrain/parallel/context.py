"""Context parallelism: ring attention with a zig-zag split of a causal sequence (chapter 8b).

A long sequence does not fit one GPU's activations, so N ranks each keep a
block of its positions (queries, keys and values of those positions).
Attention needs every query to meet every earlier key, so the key/value
blocks travel round a ring (Liu et al. 2023, *Ring Attention*): at each of
N steps a rank attends its queries to the block it holds, posts that block
to its right neighbour and receives the next from its left, the transfer
overlapping the computation.  The partial results are merged exactly with
an online softmax: each block gives an output and a log-sum-exp per query,
and two partials combine as

    lse = logaddexp(lse1, lse2),  out = out1·exp(lse1 - lse) + out2·exp(lse2 - lse).

Under a causal mask a plain split is unfair: the rank holding the end of
the sequence sees every key, the one holding the start almost none.  The
*zig-zag* split cuts the sequence into 2N chunks and gives rank r chunks r
and 2N-1-r, one early and one late, so every rank computes the same number
of score blocks (2N+1 of size c x c, c = T/2N).

The backward is written by hand (:class:`RingAttention`): queries stay, and
the key/value blocks travel round the ring again carrying their gradient
accumulators dK, dV, which each rank adds to; one last hop brings them home.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .launch import rank_device


@dataclass
class RingStats:
    """What one rank did in one ring-attention call: c x c score blocks computed, bytes sent."""

    blocks: int = 0  # forward score blocks (query chunk x key chunk) computed
    sent_bytes: int = 0  # forward and backward together
    forward_bytes: int = 0


def chunk_ids(rank: int, n: int, zigzag: bool = True) -> tuple[int, int]:
    """The two of the 2N sequence chunks rank ``rank`` holds: (r, 2N-1-r) zig-zag, (2r, 2r+1) contiguous."""
    return (rank, 2 * n - 1 - rank) if zigzag else (2 * rank, 2 * rank + 1)


def split_sequence(x: torch.Tensor, n: int, rank: int, zigzag: bool = True, dim: int = -2) -> torch.Tensor:
    """This rank's positions of ``x`` along ``dim``: its two chunks, concatenated."""
    if x.shape[dim] % (2 * n):
        raise ValueError(
            f"sequence length {x.shape[dim]} is not divisible by 2 x CP degree = {2 * n}: the "
            f"split cuts it into {2 * n} equal chunks; pad the sequence to a multiple of {2 * n}"
        )
    chunks = x.chunk(2 * n, dim)
    return torch.cat([chunks[i] for i in chunk_ids(rank, n, zigzag)], dim)


def _exchange(send: torch.Tensor, n: int) -> tuple[torch.Tensor, list]:
    """Post ``send`` to the right neighbour and a receive from the left one; return the buffer and handles."""
    r = dist.get_rank()
    recv = torch.empty_like(send)
    ops = [dist.P2POp(dist.isend, send, (r + 1) % n), dist.P2POp(dist.irecv, recv, (r - 1) % n)]
    return recv, dist.batch_isend_irecv(ops)


def _pairs(mine: tuple[int, int], theirs: tuple[int, int]):
    """(my chunk slot, their chunk slot, causal?) for every block a causal mask leaves anything of."""
    for a, qa in enumerate(mine):
        for b, kb in enumerate(theirs):
            if qa >= kb:
                yield a, b, qa == kb  # qa > kb: every key is earlier; qa == kb: the diagonal block


def _scores(q: torch.Tensor, k: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    s = (q @ k.transpose(-2, -1)) * scale  # (B, H, c, c)
    if causal:
        c = s.shape[-1]
        s = s.masked_fill(torch.ones(c, c, dtype=torch.bool, device=s.device).triu_(1), float("-inf"))
    return s


class RingAttention(torch.autograd.Function):
    """Causal attention over a sequence split across all ranks; forward and backward pass K/V round the ring.

    Inputs are this rank's (B, H, L, D) queries, keys and values, L = T/N, in
    the order of :func:`split_sequence`.  Explained in chapter 8b.
    """

    @staticmethod
    def forward(ctx, q, k, v, zigzag: bool, stats: RingStats):
        """N ring steps: attend to the block held, pass it right, merge partials by log-sum-exp."""
        n, r = dist.get_world_size(), dist.get_rank()
        scale = 1 / math.sqrt(q.shape[-1])
        mine = chunk_ids(r, n, zigzag)
        qs = q.chunk(2, -2)  # 2 x (B, H, c, D)
        out = [torch.zeros_like(x) for x in qs]
        lse = [torch.full(x.shape[:-1], float("-inf"), dtype=q.dtype, device=q.device) for x in qs]
        kv = torch.stack([k, v])  # (2, B, H, L, D): what travels
        for step in range(n):
            if step < n - 1:  # start the next hop before computing: communication overlaps compute
                nxt, handles = _exchange(kv, n)
                stats.sent_bytes += kv.numel() * kv.element_size()
            ks, vs = kv[0].chunk(2, -2), kv[1].chunk(2, -2)
            for a, b, causal in _pairs(mine, chunk_ids((r - step) % n, n, zigzag)):
                s = _scores(qs[a], ks[b], causal, scale)  # (B, H, c, c)
                blk_lse = s.logsumexp(-1)  # (B, H, c)
                blk_out = (s - blk_lse[..., None]).exp() @ vs[b]  # (B, H, c, D)
                new = torch.logaddexp(lse[a], blk_lse)
                out[a] = out[a] * (lse[a] - new).exp()[..., None] + blk_out * (blk_lse - new).exp()[..., None]
                lse[a] = new
                stats.blocks += 1
            if step < n - 1:
                for h in handles:
                    h.wait()
                kv = nxt
        out, lse = torch.cat(out, -2), torch.cat(lse, -1)  # (B, H, L, D), (B, H, L)
        stats.forward_bytes = stats.sent_bytes
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.zigzag, ctx.stats, ctx.scale = zigzag, stats, scale
        return out

    @staticmethod
    def backward(ctx, dout):
        """K, V and their gradient accumulators travel the ring; dQ stays; a last hop brings dK, dV home."""
        q, k, v, out, lse = ctx.saved_tensors
        n, r = dist.get_world_size(), dist.get_rank()
        mine, scale = chunk_ids(r, n, ctx.zigzag), ctx.scale
        delta = (dout * out).sum(-1)  # (B, H, L): rowsum(dO * O), the softmax backward's correction
        qs, dos = q.chunk(2, -2), dout.chunk(2, -2)
        lses, deltas = lse.chunk(2, -1), delta.chunk(2, -1)
        dq = [torch.zeros_like(x) for x in qs]
        travel = torch.stack([k, v, torch.zeros_like(k), torch.zeros_like(v)])  # (4, B, H, L, D): K, V, dK, dV
        for step in range(n):
            ks, vs = travel[0].chunk(2, -2), travel[1].chunk(2, -2)
            dks, dvs = travel[2].chunk(2, -2), travel[3].chunk(2, -2)  # views: add_ writes into travel
            for a, b, causal in _pairs(mine, chunk_ids((r - step) % n, n, ctx.zigzag)):
                p = (_scores(qs[a], ks[b], causal, scale) - lses[a][..., None]).exp()  # (B, H, c, c)
                dvs[b].add_(p.transpose(-2, -1) @ dos[a])  # (B, H, c, D)
                ds = p * (dos[a] @ vs[b].transpose(-2, -1) - deltas[a][..., None])  # (B, H, c, c)
                dq[a] += ds @ ks[b] * scale
                dks[b].add_(ds.transpose(-2, -1) @ qs[a] * scale)
            send = travel if step < n - 1 else travel[2:]  # the last hop only brings dK, dV home
            if n > 1:
                recv, handles = _exchange(send.contiguous(), n)
                ctx.stats.sent_bytes += send.numel() * send.element_size()
                for h in handles:
                    h.wait()
                travel = recv if step < n - 1 else torch.cat([travel[:2], recv])
        return torch.cat(dq, -2), travel[2], travel[3], None, None


def ring_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, zigzag: bool = True, stats: RingStats | None = None
) -> torch.Tensor:
    """Causal attention of this rank's (B, H, T/N, D) block of a sequence split over all ranks."""
    return RingAttention.apply(q, k, v, zigzag, stats if stats is not None else RingStats())


def ring_bytes(batch: int, heads: int, seq: int, head_dim: int, n: int, itemsize: int) -> dict[str, float]:
    """Bytes one rank sends: forward N-1 hops of K and V; backward N-1 hops of K, V, dK, dV and one of dK, dV."""
    block = batch * heads * seq // n * head_dim * itemsize  # one (B, H, T/N, D) tensor
    return {"forward": 2 * (n - 1) * block, "backward": (4 * (n - 1) + 2) * block if n > 1 else 0}


def blocks_per_rank(n: int, zigzag: bool) -> list[int]:
    """Score blocks (c x c) each rank computes under a causal mask: 2N+1 each zig-zag, 4r+3 contiguous."""
    return [
        sum(len(list(_pairs(chunk_ids(r, n, zigzag), chunk_ids(j, n, zigzag)))) for j in range(n)) for r in range(n)
    ]


# --- per-rank function for gputrain.parallel.launch ------------------------------------------


def ring_check(
    batch: int = 2, heads: int = 2, seq: int = 16, head_dim: int = 8, zigzag: bool = True, seed: int = 0
) -> dict:
    """Ring attention on this rank's block vs ``F.scaled_dot_product_attention(is_causal=True)`` on the whole.

    Float64.  Compares the output and the gradients of q, k and v (this
    rank's positions) for the loss sum(g * out) with a fixed random g.
    """
    n, r = dist.get_world_size(), dist.get_rank()
    gen = torch.Generator().manual_seed(seed)
    q, k, v, g = (
        torch.randn(batch, heads, seq, head_dim, generator=gen, dtype=torch.float64).to(rank_device()) for _ in range(4)
    )
    full = [t.clone().requires_grad_(True) for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*full, is_causal=True)  # (B, H, T, D): one device, whole sequence
    (g * ref).sum().backward()

    local = [split_sequence(t, n, r, zigzag).requires_grad_(True) for t in (q, k, v)]  # (B, H, T/N, D)
    stats = RingStats()
    out = ring_attention(*local, zigzag=zigzag, stats=stats)
    (split_sequence(g, n, r, zigzag) * out).sum().backward()
    mine = lambda t: split_sequence(t, n, r, zigzag)  # noqa: E731
    errors = {"output": (out - mine(ref)).abs().max().item()}
    errors.update({f"d{name}": (x.grad - mine(f.grad)).abs().max().item() for name, x, f in zip("qkv", local, full)})
    return {
        "errors": errors,
        "blocks": stats.blocks,
        "forward_bytes": stats.forward_bytes,
        "backward_bytes": stats.sent_bytes - stats.forward_bytes,
    }

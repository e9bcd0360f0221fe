"""Loss functions written from scratch (chapter 3).

The loss turns a prediction and the right answer into one number: how far away
the model is, right now, on this example.  Everything here is checked against
PyTorch in ``tests/test_loss.py``:

* :func:`cross_entropy` equals ``F.cross_entropy`` (class indices or
  probabilities, ``ignore_index``, label smoothing, every reduction), built on a
  stable :func:`log_softmax` (the log-sum-exp trick), so logits of +-1e4 in
  float32 are fine;
* :func:`naive_softmax` / :func:`naive_cross_entropy` are the textbook formula,
  kept only to show where it overflows;
* :func:`mse_loss` equals ``F.mse_loss``;
* :func:`chunked_cross_entropy` computes the language-model loss from the final
  hidden states and the output head without ever holding the full B x T x V
  float32 logits, with the same value and gradients as the naive path.

Shapes: N = rows (B*T tokens), C = width, V = vocabulary (number of classes).
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import sys
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from .device import Timer, synchronize
from .device import device as default_device

REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction={reduction!r} is not supported; use one of: {', '.join(REDUCTIONS)}")


def _check_smoothing(label_smoothing: float) -> None:
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")


def _reduce(loss: torch.Tensor, reduction: str, denominator) -> torch.Tensor:
    if reduction == "none":
        return loss
    total = loss.sum()
    return total if reduction == "sum" else total / denominator


# --- softmax, the naive way and the stable way --------------------------------


def naive_softmax(logits: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The textbook ``exp(z) / sum(exp(z))``: overflows once a logit passes ln(max float).

    Only for the overflow demonstration of chapter 3; use :func:`log_softmax`.
    """
    e = logits.exp()  # inf once z > ln(max float): 11.09 in fp16, 88.72 in fp32
    return e / e.sum(dim, keepdim=True)  # inf / inf = nan


def naive_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean ``-log(naive_softmax(z)[y])`` over rows of (N, V) logits: the formula, unprotected."""
    p = naive_softmax(logits, dim=-1)  # (N, V)
    return -p.gather(-1, targets.unsqueeze(-1)).log().mean()


def _row_max(z: torch.Tensor, dim: int) -> torch.Tensor:
    """The maximum along ``dim`` (kept), as a constant: 0 where a row is all -inf."""
    m = z.detach().amax(dim, keepdim=True)  # no gradient needed: the results do not depend on m
    return torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # a row of all -inf stays -inf, not nan


def logsumexp(z: torch.Tensor, dim: int = -1, keepdim: bool = False) -> torch.Tensor:
    """``log(sum(exp(z)))`` computed as ``m + log(sum(exp(z - m)))`` with ``m = max(z)``.

    After subtracting the maximum every exponent is <= 0, so nothing overflows,
    and the largest term is exactly 1, so the sum cannot underflow to 0.
    """
    m = _row_max(z, dim)
    out = m + (z - m).exp().sum(dim, keepdim=True).log()
    return out if keepdim else out.squeeze(dim)


def log_softmax(z: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``log softmax(z) = (z - m) - log(sum(exp(z - m)))``: finite for any finite logits.

    Same algebra as ``z - logsumexp(z)``, but subtracting ``m`` first keeps the
    small differences between large logits exact (logits near 1e4 in float32).
    """
    shifted = z - _row_max(z, dim)
    return shifted - shifted.exp().sum(dim, keepdim=True).log()


# --- the losses -----------------------------------------------------------------


def cross_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """Cross-entropy from scratch, the same contract as ``F.cross_entropy`` (chapter 3).

    ``logits`` are (N, V), (N, V, d1, ...) or unbatched (V,); ``targets`` are
    class indices (N,) / (N, d1, ...) / () or class probabilities shaped like
    ``logits``.  Per example the loss is ``-log softmax(z)[y]``; with label
    smoothing ``eps`` the target is ``(1 - eps) * onehot(y) + eps / V``.
    ``mean`` divides by the number of targets that are not ``ignore_index``.
    """
    _check_reduction(reduction)
    _check_smoothing(label_smoothing)
    unbatched = logits.dim() == 1
    if unbatched:
        logits, targets = logits.unsqueeze(0), targets.unsqueeze(0)
    z = logits.movedim(1, -1)  # (N, d1.., V): PyTorch puts classes in dim 1, we want them last
    V = z.shape[-1]
    logp = log_softmax(z, dim=-1)  # (N, d1.., V)

    if targets.is_floating_point():  # class probabilities (soft labels)
        if targets.shape != logits.shape:
            raise ValueError(
                f"probability targets must have the logits' shape {tuple(logits.shape)}, "
                f"got {tuple(targets.shape)}; pass class indices as integers instead"
            )
        q = targets.movedim(1, -1)  # (N, d1.., V)
        if label_smoothing:
            q = q * (1 - label_smoothing) + label_smoothing / V
        loss = -(q * logp).sum(-1)  # (N, d1..)
        denominator = loss.numel()
    else:
        if targets.shape != z.shape[:-1]:
            raise ValueError(
                f"targets of shape {tuple(targets.shape)} do not match logits {tuple(logits.shape)}; "
                f"expected {tuple(z.shape[:-1])} (one class index per row)"
            )
        valid = targets != ignore_index  # (N, d1..)
        picked = targets[valid]
        if picked.numel() and (picked.min() < 0 or picked.max() >= V):
            raise ValueError(
                f"target {int(picked.min() if picked.min() < 0 else picked.max())} is outside "
                f"[0, {V}); fix the labels or pass ignore_index for padding"
            )
        safe = torch.where(valid, targets, torch.zeros_like(targets))  # ignored rows read class 0, then are zeroed
        nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)  # (N, d1..): -log p(correct class)
        if label_smoothing:
            nll = (1 - label_smoothing) * nll - label_smoothing * logp.mean(-1)
        loss = torch.where(valid, nll, torch.zeros_like(nll))
        denominator = valid.sum()
    loss = _reduce(loss, reduction, denominator)
    return loss.squeeze(0) if unbatched and reduction == "none" else loss


def mse_loss(input: torch.Tensor, target: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Mean squared error from scratch, the same contract as ``F.mse_loss`` (chapter 3)."""
    _check_reduction(reduction)
    if input.shape != target.shape:
        raise ValueError(
            f"input {tuple(input.shape)} and target {tuple(target.shape)} differ in shape; "
            "reshape them to match (silent broadcasting is a classic bug)"
        )
    return _reduce((input - target) ** 2, reduction, input.numel())


def perplexity(loss_nats) -> float:
    """``exp(mean cross-entropy in nats)``: the number of equally likely choices the model is torn between."""
    return math.exp(float(loss_nats))


# --- the loss over a large vocabulary, in chunks ---------------------------------


def logits_bytes(batch: int, seq: int, vocab: int, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of one B x T x V logits tensor (chapter 3: 1.65 GB at GPT-2 scale, batch 8)."""
    return batch * seq * vocab * torch.empty((), dtype=dtype).element_size()


def naive_head_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """The usual path: all logits at once (as ``GPT.forward`` does), then ``F.cross_entropy``."""
    logits = (hidden @ weight.T).to(torch.promote_types(hidden.dtype, torch.float32))  # (B, T, V), all at once
    loss = F.cross_entropy(
        logits.flatten(0, -2),
        targets.flatten(),
        ignore_index=ignore_index,
        label_smoothing=label_smoothing,
        reduction=reduction,
    )
    return loss.view(targets.shape) if reduction == "none" else loss


class _ChunkedCrossEntropy(torch.autograd.Function):
    """Cross-entropy of ``hidden @ weight.T`` computed ``chunk`` rows at a time.

    Forward keeps only one (chunk, V) block of logits alive and saves, per
    row, the maximum and the log-sum-exp of the shifted logits (2N numbers).  Backward recomputes each block's logits
    (one extra matmul: memory traded for compute) and turns them straight into
    ``dL/dlogits = softmax - target`` and then into the two gradients.
    """

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk, ignore_index, label_smoothing, reduction):
        N = hidden.shape[0]
        acc = torch.promote_types(hidden.dtype, torch.float32)  # the loss itself is never in bf16/fp16
        valid = targets != ignore_index  # (N,)
        safe = torch.where(valid, targets, torch.zeros_like(targets))
        m = torch.empty(N, dtype=acc, device=hidden.device)  # (N,) row maxima
        log_s = torch.empty(N, dtype=acc, device=hidden.device)  # (N,) log sum exp(z - m)
        loss = torch.empty(N, dtype=acc, device=hidden.device)  # (N,)
        for s in range(0, N, chunk):
            rows = slice(s, s + chunk)
            z = (hidden[rows] @ weight.T).to(acc)  # (n, V): the only logits alive
            m[rows] = _row_max(z, -1).squeeze(1)
            z.sub_(m[rows, None])  # shifted logits, in place
            z_target = z.gather(1, safe[rows, None]).squeeze(1)  # (n,)
            z_mean = z.mean(-1) if label_smoothing else None  # (n,), read before z is overwritten
            log_s[rows] = z.exp_().sum(-1).log()  # exp in place: still a single (n, V) buffer
            nll = log_s[rows] - z_target  # (n,) -log softmax at the target
            if label_smoothing:
                nll = (1 - label_smoothing) * nll + label_smoothing * (log_s[rows] - z_mean)
            loss[rows] = nll
            del z
        loss = torch.where(valid, loss, torch.zeros_like(loss))
        ctx.save_for_backward(hidden, weight, safe, valid, m, log_s)
        ctx.chunk, ctx.eps, ctx.reduction = chunk, label_smoothing, reduction
        return _reduce(loss, reduction, valid.sum())

    @staticmethod
    def backward(ctx, grad_out):
        hidden, weight, safe, valid, m, log_s = ctx.saved_tensors
        chunk, eps, reduction = ctx.chunk, ctx.eps, ctx.reduction
        N, V = hidden.shape[0], weight.shape[0]
        # dL/dloss_i for every row: the same scalar (sum), scalar / count (mean) or per row (none)
        scale = grad_out.to(m.dtype).expand(N) if reduction != "none" else grad_out.to(m.dtype)
        if reduction == "mean":
            scale = scale / valid.sum()
        scale = torch.where(valid, scale, torch.zeros_like(scale))  # (N,)
        grad_h = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None  # (N, C)
        grad_w = (
            torch.zeros(weight.shape, dtype=m.dtype, device=weight.device) if ctx.needs_input_grad[1] else None
        )  # (V, C), accumulated over chunks
        for s in range(0, N, chunk):
            rows = slice(s, s + chunk)
            g = (hidden[rows] @ weight.T).to(m.dtype)  # (n, V): recomputed logits
            g.sub_(m[rows, None]).sub_(log_s[rows, None]).exp_()  # softmax, in place: no second buffer
            g.scatter_add_(1, safe[rows, None], torch.full_like(g[:, :1], -(1 - eps)))  # - (1-eps) onehot
            if eps:
                g.sub_(eps / V)  # - eps / V everywhere
            g.mul_(scale[rows, None])  # (n, V) = dL/dlogits
            g = g.to(hidden.dtype)
            if grad_h is not None:
                grad_h[rows] = g @ weight  # (n, C)
            if grad_w is not None and grad_w.dtype == g.dtype:
                grad_w.addmm_(g.T, hidden[rows])  # (V, C) += (V, n) @ (n, C), no temporary
            elif grad_w is not None:
                grad_w += (g.T @ hidden[rows]).to(grad_w.dtype)  # bf16/fp16 inputs: accumulate in fp32
            del g
        grad_w = grad_w.to(weight.dtype) if grad_w is not None else None
        return grad_h, grad_w, None, None, None, None, None


def chunked_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    chunk_size: int = 1024,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """Cross-entropy of the output head ``hidden @ weight.T`` without the full logits (chapter 3).

    ``hidden`` is (B, T, C) or (N, C), ``weight`` the head's (V, C) matrix,
    ``targets`` (B, T) or (N,).  Peak extra memory is about ``chunk_size x V``
    floats instead of several ``B x T x V`` tensors; value and gradients equal
    :func:`naive_head_cross_entropy`.
    """
    _check_reduction(reduction)
    _check_smoothing(label_smoothing)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if hidden.shape[:-1] != targets.shape:
        raise ValueError(
            f"hidden {tuple(hidden.shape)} needs one target per row, got targets "
            f"{tuple(targets.shape)}; pass targets shaped {tuple(hidden.shape[:-1])}"
        )
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[-1]:
        raise ValueError(
            f"weight must be (V, C={hidden.shape[-1]}), got {tuple(weight.shape)}; "
            "pass the head's weight (nn.Linear(C, V).weight)"
        )
    flat_t = targets.reshape(-1)  # (N,)
    picked = flat_t[flat_t != ignore_index]
    if picked.numel() and (picked.min() < 0 or picked.max() >= weight.shape[0]):
        raise ValueError(f"targets must be in [0, {weight.shape[0]}) or ignore_index={ignore_index}")
    loss = _ChunkedCrossEntropy.apply(
        hidden.reshape(-1, hidden.shape[-1]), weight, flat_t, chunk_size, ignore_index, label_smoothing, reduction
    )
    return loss.view(targets.shape) if reduction == "none" else loss


# --- measuring the memory it saves ------------------------------------------------


@contextlib.contextmanager
def _quiet_fds():
    """Silence file descriptors 1 and 2: the profiler's C++ side prints start/stop markers there."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def peak_memory(fn: Callable[[], object], dev: Optional[torch.device] = None) -> int:
    """Peak bytes allocated while ``fn()`` runs, above what was allocated before it.

    On a GPU: ``torch.cuda.max_memory_allocated``.  On the CPU there is no such
    counter, so the profiler records every allocation and free of the CPU
    allocator (``profile_memory=True``) and we replay them in time order.
    """
    dev = dev or default_device()
    if dev.type == "cuda":
        synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
        fn()
        synchronize(dev)
        return torch.cuda.max_memory_allocated(dev) - base
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with _quiet_fds(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    sizes, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:  # walk the event tree; allocation events carry a signed size
        node = stack.pop()
        if node.typed[0] == _EventType.Allocation:
            sizes.append((node.start_time_ns, node.typed[1].alloc_size))
        stack.extend(node.children)
    live = peak = 0
    for _, size in sorted(sizes):
        live += size
        peak = max(peak, live)
    return peak


def compare_head_memory(
    batch: int,
    seq: int,
    vocab: int,
    width: int,
    chunk_size: int = 1024,
    dtype: torch.dtype = torch.float32,
    dev: Optional[torch.device] = None,
    repeats: int = 3,
    seed: int = 0,
) -> dict:
    """Peak memory and time of forward + backward through the output head: naive vs chunked.

    Used by chapter 3 (CPU, live) and ``bench/gpu/chunked_loss.py`` (GPT-2 scale on a GPU).
    """
    dev = dev or default_device()
    g = torch.Generator(device="cpu").manual_seed(seed)
    hidden = torch.randn(batch, seq, width, generator=g).to(dev, dtype).requires_grad_()  # (B, T, C)
    weight = (0.02 * torch.randn(vocab, width, generator=g)).to(dev, dtype).requires_grad_()  # (V, C)
    targets = torch.randint(0, vocab, (batch, seq), generator=g).to(dev)  # (B, T)
    out: dict = {
        "batch": batch,
        "seq": seq,
        "vocab": vocab,
        "width": width,
        "chunk_size": chunk_size,
        "dtype": str(dtype).removeprefix("torch."),
        "device": str(dev),
        "logits_bytes_fp32": logits_bytes(batch, seq, vocab),
    }
    losses = {
        "naive": lambda: naive_head_cross_entropy(hidden, weight, targets),
        "chunked": lambda: chunked_cross_entropy(hidden, weight, targets, chunk_size),
    }
    for name, loss_fn in losses.items():

        def step() -> torch.Tensor:
            loss = loss_fn()
            loss.backward()
            return loss.detach()

        out[f"{name}_loss"] = step().item()  # also the warm-up (allocator caches, kernel choice)
        hidden.grad = weight.grad = None  # free old gradients outside the measured region
        out[f"{name}_peak_bytes"] = peak_memory(step, dev)
        seconds = []
        for _ in range(repeats):
            hidden.grad = weight.grad = None
            with Timer(dev) as t:
                step()
            seconds.append(t.seconds)
        hidden.grad = weight.grad = None
        out[f"{name}_seconds"] = statistics.median(seconds)
    out["saving_factor"] = out["naive_peak_bytes"] / out["chunked_peak_bytes"]
    return out

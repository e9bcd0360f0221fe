"""The language-model loss over a large vocabulary, a chunk of rows at a time (chapter 3).

:func:`chunked_cross_entropy` computes the loss from the final hidden states
and the output head without ever holding the full B x T x V float32 logits,
with the same value and gradients as :func:`naive_head_cross_entropy`, the
usual all-logits-at-once path.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .losses import _check_reduction, _check_smoothing, _reduce
from .softmax import _row_max


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

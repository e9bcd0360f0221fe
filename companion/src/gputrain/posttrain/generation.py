"""Replies to many prompts at once with the KV cache, greedy or sampled, each stopped at its own end (chapter 12).

Scoring a model on a task asks it hundreds of questions, each many times.
:func:`generate_replies` runs them as batches through the GPT's
:class:`gputrain.model.KVCache`: the prompts once, then one token per step.

Padding could change a result: the GPT's positions are absolute and its
attention has no padding mask, so a left-padded prompt would put its tokens at
other positions and let them attend to the pads.  So nothing is padded:
sequences are grouped by prompt length, and a batch holds prompts of one
length only.  A sequence that reaches its stop token (``<|end|>`` for a chat
model, a newline for a base model) leaves the batch, its rows of the cache
with it.  A sampled sequence draws from its own ``torch.Generator``, seeded by
:func:`sample_seed` from the run's seed, its prompt and its sample number, so
its tokens are the same in any batch, alone or among thousands.

:func:`decode` is the machinery underneath: it also keeps the stop token and,
when asked, each sampled token's log-probability under the distribution it
was drawn from, which reinforcement learning's rollouts need (chapter 13,
:mod:`~gputrain.posttrain.rollout`).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from typing import Sequence

import torch
import torch.nn.functional as F

from ..model import GPT, KVCache

NOISE_BLOCK = 2**20  # Exp(1) numbers a CPU batch draws ahead at most (4 MiB of float32; see _exponentials)


def sample_seed(seed: int, prompt: Sequence[int], sample: int) -> int:
    """The seed of one sequence's generator: a SHA-256 of the run's seed, the prompt's ids and the sample number."""
    text = f"{seed}:{','.join(str(int(i)) for i in prompt)}:{sample}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1  # below 2**63


def check_sampling(temperature: float, top_k: int | None, samples: int, max_new_tokens: int) -> None:
    """Refuse settings that cannot generate, with one line that names the fix."""
    if not temperature >= 0 or temperature == float("inf"):
        raise ValueError(f"temperature must be a finite number >= 0 (0: greedy), got {temperature}")
    if top_k is not None and top_k < 0:
        raise ValueError(f"top_k must be >= 1 (or 0 for no cut), got {top_k}")
    if samples < 1 or max_new_tokens < 1:
        raise ValueError(f"samples and max_new_tokens must be >= 1, got {samples} and {max_new_tokens}")


@torch.no_grad()
def generate_replies(
    model: GPT,
    prompts: Sequence[Sequence[int]],
    *,
    stop: int,
    samples: int = 1,
    temperature: float = 0.0,
    top_k: int | None = None,
    seed: int = 0,
    max_new_tokens: int = 32,
    batch_size: int = 64,
) -> list[list[list[int]]]:
    """``samples`` replies to each prompt: ``out[i][j]`` is the ids of reply j to prompt i, without the stop token.

    ``temperature`` 0 takes the likeliest token (greedy: every sample is the
    same, so one is generated and copied); above 0 the logits are divided by
    it, ``top_k`` (0 or None: all) keeps the k likeliest, and a token is drawn
    from the softmax with the sequence's own generator (:func:`sample_seed`).
    A reply ends at ``stop``, after ``max_new_tokens``, or where the model's
    context is full, whichever comes first.  A prompt must leave room for one
    token in the context.  The model runs in eval mode and is left as it was.
    """
    check_sampling(temperature, top_k, samples, max_new_tokens)
    drawn = 1 if temperature == 0 else samples  # greedy: every sample is the same
    sampling = dict(temperature=temperature, top_k=top_k, seed=seed, max_new_tokens=max_new_tokens)
    traces = decode(model, prompts, stop=stop, samples=drawn, batch_size=batch_size, **sampling)
    out = [[ids[:-1] if ids and ids[-1] == stop else ids for ids, _ in row] for row in traces]
    return out if drawn == samples else [[list(r[0]) for _ in range(samples)] for r in out]


def check_prompts(model: GPT, prompts: Sequence[Sequence[int]]) -> None:
    """Refuse a prompt that leaves no room for a reply in the model's context, with one line."""
    block = model.cfg.block_size
    for n, p in enumerate(prompts):
        if not 1 <= len(p) < block + 1:
            raise ValueError(
                f"prompt {n} is {len(p)} tokens; it needs 1 to {block} to leave the model's context of {block} "
                "room for a reply (shorten it, or use fewer few-shot examples)"
            )


@torch.inference_mode()  # no autograd bookkeeping at all: the traces leave as Python lists
def decode(
    model: GPT,
    prompts: Sequence[Sequence[int]],
    *,
    stop: int,
    samples: int,
    temperature: float,
    top_k: int | None,
    seed: int,
    max_new_tokens: int,
    batch_size: int,
    logprobs: bool = False,
) -> list[list[tuple[list[int], list[float]]]]:
    """The machinery of :func:`generate_replies`: ``out[i][j]`` is (ids, log-probs) of sample j of prompt i.

    The ids end with ``stop`` where the sequence reached it (the stop token
    is a choice the policy made, and reinforcement learning scores it).
    With ``logprobs``, each id's log-probability under the distribution it
    was drawn from (log softmax of the logits / temperature after the top-k
    cut; 0.0 for greedy); else the second list is empty.
    """
    check_prompts(model, prompts)
    block = model.cfg.block_size
    groups: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for i, p in enumerate(prompts):
        groups[len(p)] += [(i, j) for j in range(samples)]
    out: list[list[tuple[list[int], list[float]]]] = [[([], []) for _ in range(samples)] for _ in prompts]
    sampling = (temperature, top_k, seed, logprobs)
    was_training = model.training
    model.eval()
    try:
        for length, rows in sorted(groups.items()):
            steps = min(max_new_tokens, block - length + 1)  # the last token is chosen, never fed back
            for start in range(0, len(rows), batch_size):
                chunk = rows[start : start + batch_size]
                traces = _decode(model, [prompts[i] for i, _ in chunk], chunk, stop, steps, *sampling)
                for (i, j), trace in zip(chunk, traces):
                    out[i][j] = trace
    finally:
        model.train(was_training)
    return out


def _decode(model: GPT, prompts, rows, stop: int, steps: int, temperature, top_k, seed, logprobs):
    """One batch of prompts of one length: up to ``steps`` tokens each, a row leaving as it reaches ``stop``."""
    p = next(model.parameters())
    ids = torch.tensor([list(map(int, q)) for q in prompts], dtype=torch.long, device=p.device)  # (B, P)
    B, P = ids.shape
    gens = None
    if temperature > 0:
        gens = [torch.Generator(p.device).manual_seed(sample_seed(seed, q, j)) for q, (_, j) in zip(prompts, rows)]
    cache = KVCache(model.cfg, B, capacity=P + steps - 1, device=p.device, dtype=p.dtype)
    logits = model.head(model.hidden(ids, cache)[:, -1])  # (B, V): the prompts run once
    alive = list(range(B))  # the batch row each live sequence came from
    traces: list[tuple[list[int], list[float]]] = [([], []) for _ in range(B)]
    ahead, noise = max(1, NOISE_BLOCK // (B * logits.size(-1))), None  # steps of noise drawn at once (CPU)
    for step in range(steps):
        if gens is not None and p.device.type == "cpu" and step % ahead == 0:
            noise = _exponentials(gens, min(ahead, steps - step), logits.size(-1))  # (B', n, V)
        nxt = choose(logits, temperature, top_k, gens, None if noise is None else noise[:, step % ahead])  # (B',)
        scores = _chosen_logprobs(logits, nxt, temperature, top_k).tolist() if logprobs else None
        for k, (row, token) in enumerate(zip(alive, nxt.tolist())):
            traces[row][0].append(token)
            if scores is not None:
                traces[row][1].append(scores[k])
        going = nxt != stop  # (B',)
        if step == steps - 1 or not bool(going.any()):
            break
        if not bool(going.all()):  # the finished sequences leave the batch, and their rows of the cache
            keep = going.nonzero().flatten().tolist()
            alive = [alive[k] for k in keep]
            gens = None if gens is None else [gens[k] for k in keep]
            noise = None if noise is None else noise[going]
            for layer in cache.layers:
                layer.k, layer.v = layer.k[going], layer.v[going]
            nxt = nxt[going]
        logits = model.head(model.hidden(nxt[:, None], cache)[:, -1])  # (B', V): one new token each
    return traces


def _exponentials(generators: list, steps: int, vocab: int) -> torch.Tensor:
    """(B, steps, V) Exp(1) numbers, row r the next ``steps * V`` of CPU generator r: the noise :func:`choose` draws.

    A CPU generator gives the same numbers in one block as one step at a
    time, so a batch draws ``steps`` steps of them at once, one call per row
    instead of one per row and step.  A GPU generator (Philox) does not, so
    on a GPU :func:`choose` draws them step by step.
    """
    q = torch.empty(len(generators), steps, vocab, dtype=torch.float32)  # choose's probabilities are float32
    for row, g in zip(q, generators):
        row.exponential_(generator=g)
    return q


def _chosen_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float, top_k) -> torch.Tensor:
    """log p(token) (B,) under the distribution :func:`choose` draws from; 0.0 for greedy (a sure choice)."""
    if temperature == 0:
        return torch.zeros(len(tokens))
    wide = torch.promote_types(logits.dtype, torch.float32)  # float32, or float64 for a float64 model
    logp = F.log_softmax(sampling_logits(logits, temperature, top_k, wide), dim=-1)  # (B, V)
    return logp.gather(-1, tokens[:, None]).squeeze(-1)


def sampling_logits(logits: torch.Tensor, temperature: float, top_k: int | None = None, dtype=torch.float32):
    """The logits a draw is made from: in ``dtype``, divided by ``temperature``, below the k-th largest at -inf."""
    logits = logits.to(dtype) / temperature
    if top_k:
        kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return logits


def choose(
    logits: torch.Tensor,
    temperature: float,
    top_k: int | None = None,
    generators: list | None = None,
    noise: torch.Tensor | None = None,
) -> torch.Tensor:
    """The next token of each row of ``logits`` (B, V): the argmax at temperature 0, else a draw per row.

    Row r draws with ``generators[r]``, exactly as :meth:`gputrain.model.GPT.stream`
    draws for a batch of one (logits / temperature, the top-k cut, softmax, multinomial).
    The draw is ``torch.multinomial``'s own for one sample (ATen's ``Distributions.cpp``):
    the argmax of p / q with q ~ Exp(1), the ``exponential_`` numbers of the row's
    generator.  Here each row draws its q and one batched division and argmax pick
    every row's token: the same tokens, without a ``multinomial`` call and its checks
    per row (tests/test_posttrain_rollout.py holds the two equal).  ``noise`` (B, V):
    those Exp(1) numbers drawn ahead by the generators (:func:`_exponentials`).
    """
    if temperature == 0:
        return logits.argmax(dim=-1)  # (B,): the first of equal maxima
    probs = F.softmax(sampling_logits(logits, temperature, top_k), dim=-1)  # (B, V)
    if generators is None or len(generators) != len(probs):
        raise ValueError("sampling needs one torch.Generator per row of logits")
    if bool(probs.isnan().any()):  # multinomial's own check, once per batch
        raise ValueError("the logits hold NaN, so no token can be drawn; check the model's weights and inputs")
    if noise is None:
        noise = torch.empty_like(probs)  # (B, V)
        for row, g in zip(noise, generators):
            row.exponential_(generator=g)
    return (probs / noise).argmax(dim=-1)  # (B,)

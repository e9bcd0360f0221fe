"""Scoring a model on a task: greedy accuracy, pass@k, and their 95% intervals (chapter 12).

A chat model is asked each problem as a user turn; a pretrained (base) model
cannot follow a chat turn, so it gets a few-shot text prompt instead: ``shots``
solved problems from the *train* split, then the question, in one fixed
format (:func:`few_shot_prompt`).  Both replies are graded by the same
:func:`gputrain.posttrain.grade`.

* Greedy accuracy: one reply at temperature 0 per problem, with Wilson's
  interval (it stays inside [0, 1] and is right at 0 or n correct).
* pass@k: ``samples`` = n replies per problem at a temperature; from the c
  correct ones, the unbiased estimator of Chen et al. (2021),
  1 - C(n - c, k) / C(n, k), averaged over problems, with a percentile
  bootstrap over problems for the interval.
* Seeds: :func:`combine_seeds` gives the mean over seeds and a Student-t
  interval (the chapter reports >= 3 seeds).
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field
from statistics import NormalDist, fmean, stdev
from typing import Sequence

import numpy as np

from ..data import ByteTokenizer
from ..model import GPT
from .chat import ChatFormat
from .generation import check_sampling, generate_replies
from .tasks import ANSWER_PREFIX, Problem, grade
from .tasks import problems as _draw

DEFAULT_SHOTS = 3  # solved examples in a base model's prompt
DEFAULT_KS = tuple(range(1, 17))  # pass@1 ... pass@16
CONFIDENCE = 0.95
NEWLINE = ByteTokenizer().encode("\n")[0]  # where a base model's answer line ends


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of Chen et al. (2021) from n samples of which c are correct: 1 - C(n-c, k) / C(n, k).

    Computed as 1 - prod_{i=n-c+1}^{n} (1 - k / i), which never forms a
    binomial coefficient, so it stays exact to rounding for any n.
    """
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


@dataclass(frozen=True)
class Estimate:
    """A value with the bounds of its interval."""

    value: float
    low: float
    high: float

    def __str__(self) -> str:
        return f"{self.value:.3f} [{self.low:.3f}, {self.high:.3f}]"


def wilson_interval(correct: int, n: int, confidence: float = CONFIDENCE) -> Estimate:
    """The share ``correct / n`` with Wilson's score interval."""
    if n < 1 or not 0 <= correct <= n:
        raise ValueError(f"need n >= 1 and 0 <= correct <= n; got {correct} of {n}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    low = 0.0 if correct == 0 else max(0.0, centre - half)  # exactly 0 and 1 at the ends, not 1e-17 off
    high = 1.0 if correct == n else min(1.0, centre + half)
    return Estimate(p, low, high)


def bootstrap_means(values, *, confidence: float = CONFIDENCE, resamples: int = 2000, seed: int = 0) -> list[Estimate]:
    """Each column's mean over rows (problems) with a percentile bootstrap interval: ``values`` is (P,) or (P, K).

    Every column is resampled with the same draws of problems, seeded.
    """
    v = np.asarray(values, dtype=np.float64)
    v = v[:, None] if v.ndim == 1 else v  # (P, K)
    if len(v) < 1:
        raise ValueError("the bootstrap needs at least one problem")
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(len(v), np.full(len(v), 1 / len(v)), size=resamples)  # (R, P): each row a resample
    means = counts @ v / len(v)  # (R, K)
    low, high = np.quantile(means, [(1 - confidence) / 2, (1 + confidence) / 2], axis=0)  # (K,) each
    return [Estimate(float(m), float(lo), float(hi)) for m, lo, hi in zip(v.mean(0), low, high)]


@functools.lru_cache(maxsize=None)
def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with ``df`` degrees of freedom, 0.5 < p < 1.

    With t = sqrt(df) tan(theta), the density in theta is proportional to
    cos(theta)^(df - 1) on (-pi/2, pi/2), smooth and bounded: Simpson's rule
    integrates it and bisection finds theta.
    """
    if not 0.5 < p < 1 or df < 1:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and df >= 1; got p={p}, df={df}")

    def mass(theta: float, n: int = 2000) -> float:  # integral of cos^(df-1) from 0 to theta
        h = theta / n
        ys = [math.cos(i * h) ** (df - 1) for i in range(n + 1)]
        return h / 3 * (ys[0] + ys[-1] + 4 * sum(ys[1:-1:2]) + 2 * sum(ys[2:-1:2]))

    target = (2 * p - 1) * mass(math.pi / 2)
    lo, hi = 0.0, math.pi / 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mass(mid) < target else (lo, mid)
    return math.sqrt(df) * math.tan((lo + hi) / 2)


def mean_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Estimate:
    """The mean of ``values`` (one per seed) with a Student-t interval: mean +- t * s / sqrt(n)."""
    values = [float(x) for x in values]
    if len(values) < 2:
        raise ValueError(f"an interval across seeds needs at least 2 values, got {len(values)}; run more seeds")
    m, half = fmean(values), t_quantile(0.5 + confidence / 2, len(values) - 1) * stdev(values) / len(values) ** 0.5
    return Estimate(m, m - half, m + half)


def few_shot_prompt(problem: Problem, examples: Sequence[Problem]) -> str:
    """A base model's prompt: each solved example as ``question``, ``Answer: value``, a blank line; then the question.

    The prompt ends with ``Answer:``, so the model's line continues it.
    Examples must come from the train split, so no test answer is ever shown.
    """
    for ex in examples:
        if ex.split != "train":
            raise ValueError(f"few-shot example {ex.question!r} is a test problem; draw examples from split='train'")
    solved = "".join(f"{ex.question}\n{ANSWER_PREFIX} {ex.answer}\n\n" for ex in examples)
    return f"{solved}{problem.question}\n{ANSWER_PREFIX}"


def prompt_ids(fmt: ChatFormat | None, problem: Problem, examples: Sequence[Problem] = ()) -> list[int]:
    """The ids that ask for a reply: a chat turn (after the examples as earlier turns), or the few-shot text."""
    if fmt is not None:
        return fmt.encode_prompt([m for ex in examples for m in ex.messages()] + problem.prompt())
    return ByteTokenizer().encode(few_shot_prompt(problem, examples))


def reply_text(fmt: ChatFormat | None, ids: Sequence[int]) -> str:
    """The text :func:`grade` reads: the assistant's turn, or ``Answer:`` and the base model's line after it."""
    return fmt.reply(ids) if fmt is not None else ANSWER_PREFIX + ByteTokenizer().decode(list(ids))


@dataclass
class TaskResult:
    """What :func:`evaluate_task` measured on one set of problems with one seed."""

    task: str
    problems: int
    chat: bool
    shots: int
    seed: int
    samples: int
    temperature: float
    greedy: Estimate | None  # greedy accuracy, Wilson interval
    greedy_correct: int | None
    correct: list[int]  # per problem: correct replies among the samples
    pass_at: dict[int, Estimate] = field(default_factory=dict)  # k -> mean pass@k, bootstrap interval
    replies: list[str] = field(default_factory=list)  # the greedy replies, in problem order

    def summary(self) -> str:
        """One line: what was asked, the greedy accuracy and pass@1 / pass@max k."""
        how = "chat" if self.chat else f"base, {self.shots}-shot"
        parts = [f"{self.task} ({how}), {self.problems} problems, seed {self.seed}"]
        if self.greedy is not None:
            parts.append(f"greedy accuracy {self.greedy} ({self.greedy_correct}/{self.problems})")
        for k in sorted({min(self.pass_at), max(self.pass_at)} if self.pass_at else ()):
            parts.append(f"pass@{k} {self.pass_at[k]}")
        return "; ".join(parts)

    def table(self) -> str:
        """pass@k for every k, one row each, with its interval."""
        head = f"pass@k from {self.samples} samples at temperature {self.temperature:g}, 95% bootstrap interval"
        rows = [f"{'k':>4}  {'pass@k':>7}  interval"]
        rows += [f"{k:>4}  {e.value:>7.3f}  [{e.low:.3f}, {e.high:.3f}]" for k, e in sorted(self.pass_at.items())]
        return "\n".join([head, *rows])

    def to_dict(self) -> dict:
        d = asdict(self)
        d["pass_at"] = {str(k): v for k, v in d["pass_at"].items()}
        return d


def evaluate_task(
    model: GPT,
    fmt: ChatFormat | None,
    problems: Sequence[Problem],
    *,
    samples: int = 16,
    temperature: float = 1.0,
    top_k: int | None = None,
    ks: Sequence[int] = DEFAULT_KS,
    greedy: bool = True,
    seed: int = 0,
    shots: int | None = None,
    digits: int = 2,
    max_new_tokens: int = 32,
    batch_size: int = 64,
) -> TaskResult:
    """Greedy accuracy and pass@k of ``model`` on ``problems``, with 95% intervals.

    ``fmt``: the chat format of a fine-tuned model, or None for a base model,
    which is prompted with ``shots`` solved train problems (default
    :data:`DEFAULT_SHOTS`; a chat model gets ``shots`` earlier turns, default
    0), drawn with ``digits`` and ``seed``.  ``samples`` replies per problem
    at ``temperature`` (and ``top_k``) give pass@k for each k in ``ks``;
    ``samples=0`` skips them.  ``seed`` seeds the samples and the bootstrap.
    """
    task = _check_task(model, fmt, problems, samples, ks, temperature, top_k, max_new_tokens)
    shots = (0 if fmt is not None else DEFAULT_SHOTS) if shots is None else shots
    if shots < 0:
        raise ValueError(f"shots must be >= 0, got {shots}")
    examples = _draw(task, shots, split="train", seed=seed, digits=digits)
    prompts = [prompt_ids(fmt, p, examples) for p in problems]
    longest = max(map(len, prompts))
    if longest >= model.cfg.block_size:
        raise ValueError(
            f"a prompt with {shots} examples is {longest} tokens and leaves no room for a reply in the model's "
            f"context of {model.cfg.block_size}; use fewer shots"
        )
    stop = fmt.end_id if fmt is not None else NEWLINE
    gen = dict(stop=stop, max_new_tokens=max_new_tokens, batch_size=batch_size)
    result = TaskResult(task, len(problems), fmt is not None, shots, seed, samples, temperature, None, None, [])
    if greedy:
        replies = [reply_text(fmt, r[0]) for r in generate_replies(model, prompts, **gen)]
        right = sum(grade(p, r) for p, r in zip(problems, replies))
        result.greedy, result.greedy_correct, result.replies = wilson_interval(right, len(prompts)), right, replies
    if samples:
        sampling = dict(samples=samples, temperature=temperature, top_k=top_k, seed=seed)
        drawn = generate_replies(model, prompts, **sampling, **gen)
        result.correct = [sum(grade(p, reply_text(fmt, r)) for r in rs) for p, rs in zip(problems, drawn)]
        ks = sorted(set(ks))
        table = [[pass_at_k(samples, c, k) for k in ks] for c in result.correct]  # (P, K)
        result.pass_at = dict(zip(ks, bootstrap_means(table, seed=seed)))
    return result


def _check_task(model: GPT, fmt: ChatFormat | None, problems, samples: int, ks, temperature, top_k, max_new) -> str:
    if not problems:
        raise ValueError("no problems to evaluate; ask for at least one")
    tasks = {p.task for p in problems}
    if len(tasks) != 1:
        raise ValueError(f"the problems mix tasks {sorted(tasks)}; evaluate one task at a time")
    if samples < 0 or (samples and (not ks or min(ks) < 1 or max(ks) > samples)):
        raise ValueError(
            f"pass@k needs 1 <= k <= samples; got k in {sorted(ks)} with {samples} samples per problem: "
            "raise the samples or lower k"
        )
    if samples:
        check_sampling(temperature, top_k, samples, max_new)
    if fmt is not None and model.cfg.vocab_size < fmt.vocab_size:
        raise ValueError(
            f"the model reads {model.cfg.vocab_size} tokens but the chat format needs {fmt.vocab_size}; "
            "fine-tune it for chat first (gputrain sft), or evaluate it as a base model"
        )
    return tasks.pop()


def combine_seeds(results: Sequence[TaskResult], confidence: float = CONFIDENCE) -> dict[str, Estimate]:
    """The mean over seeds of greedy accuracy and each pass@k, with a Student-t interval across the seeds.

    Keys: ``"greedy"`` (where every result has it) and ``"pass@k"`` for the k every result has.
    """
    out = {}
    if results and all(r.greedy is not None for r in results):
        out["greedy"] = mean_interval([r.greedy.value for r in results], confidence)
    for k in sorted(set.intersection(*(set(r.pass_at) for r in results)) if results else ()):
        out[f"pass@{k}"] = mean_interval([r.pass_at[k].value for r in results], confidence)
    if not out:
        raise ValueError("no measure is shared by all the results; combine results of one evaluation setting")
    return out

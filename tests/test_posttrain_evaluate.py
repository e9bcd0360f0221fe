"""Chapter 12's scoring: pass@k against enumeration, the intervals, batched generation that padding cannot change."""

import itertools
import math
import random

import pytest
import torch

from gputrain.model import GPT, GPTConfig
from gputrain.posttrain import (
    ANSWER_PREFIX,
    ChatFormat,
    Estimate,
    TaskResult,
    bootstrap_means,
    combine_seeds,
    evaluate_task,
    few_shot_prompt,
    generate_replies,
    grade,
    mean_interval,
    pass_at_k,
    problems,
    prompt_ids,
    reply_text,
    sample_seed,
    t_quantile,
    wilson_interval,
)
from gputrain.posttrain import evaluate as ev

FMT = ChatFormat()


def tiny_gpt(vocab_size=260, block_size=64, seed=0) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=vocab_size, block_size=block_size, n_layer=2, n_head=2, n_embd=32)).eval()


def random_prompts(n, seed=0, lo=3, hi=12, vocab=256):
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


# --- pass@k ------------------------------------------------------------------------------------------


def brute_pass_at_k(n, c, k):
    """The share of the k-subsets of n samples (the first c correct) that hold a correct one."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_equals_enumerating_every_subset_of_samples():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_k_edge_cases_and_large_n_stay_exact():
    assert pass_at_k(16, 0, 16) == 0.0 and pass_at_k(16, 16, 1) == 1.0
    assert pass_at_k(16, 4, 1) == pytest.approx(4 / 16)  # pass@1 is the share correct
    assert pass_at_k(10, 8, 3) == 1.0  # n - c < k: every triple holds a correct sample
    assert pass_at_k(1000, 1, 500) == pytest.approx(0.5, abs=1e-12)
    exact = 1 - math.comb(900, 100) / math.comb(1000, 100)  # big integers, no rounding until the division
    assert pass_at_k(1000, 100, 100) == pytest.approx(exact, rel=1e-12)
    for bad in [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5), (0, 0, 1)]:
        with pytest.raises(ValueError, match="pass@k needs"):
            pass_at_k(*bad)


# --- intervals ----------------------------------------------------------------------------------------


def test_wilson_bounds_solve_the_score_equation_and_stay_in_zero_one():
    z = 1.959963984540054
    for correct, n in [(0, 10), (3, 10), (10, 10), (57, 200)]:
        e = wilson_interval(correct, n)
        assert e.value == correct / n and 0 <= e.low <= e.value <= e.high <= 1
        for p in (e.low, e.high):  # the bounds are the p with |p_hat - p| = z sqrt(p (1 - p) / n)
            if 0 < p < 1:
                assert (correct / n - p) ** 2 == pytest.approx(z * z * p * (1 - p) / n, rel=1e-9)
    assert wilson_interval(0, 10).low == 0 and wilson_interval(0, 10).high == pytest.approx(z * z / (10 + z * z))
    with pytest.raises(ValueError):
        wilson_interval(3, 0)


def test_t_quantile_matches_closed_forms_and_scipy():
    stats = pytest.importorskip("scipy.stats")
    assert t_quantile(0.975, 1) == pytest.approx(math.tan(math.pi * 0.475), rel=1e-9)  # Cauchy
    assert t_quantile(0.975, 2) == pytest.approx(0.95 / math.sqrt(2 * 0.975 * 0.025), rel=1e-9)
    for df in (1, 2, 3, 4, 9, 30, 200):
        for p in (0.9, 0.975, 0.995):
            assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-8), (p, df)
    values = [0.31, 0.27, 0.35, 0.30]
    e = mean_interval(values)
    low, high = stats.t.interval(0.95, len(values) - 1, loc=sum(values) / 4, scale=stats.sem(values))
    assert (e.low, e.high) == pytest.approx((low, high), rel=1e-9)
    with pytest.raises(ValueError, match="at least 2"):
        mean_interval([0.3])


def test_bootstrap_is_seeded_holds_the_mean_and_has_the_normal_width():
    rng = random.Random(0)
    col = [float(rng.random() < 0.3) for _ in range(400)]
    a = bootstrap_means(col, seed=1)[0]
    assert a == bootstrap_means(col, seed=1)[0] and a != bootstrap_means(col, seed=2)[0]
    assert a.low < a.value < a.high and a.value == pytest.approx(sum(col) / 400)
    sd = math.sqrt(a.value * (1 - a.value) / 400)
    assert (a.high - a.low) == pytest.approx(2 * 1.96 * sd, rel=0.15)
    const = bootstrap_means([[0.5, 1.0]] * 20)
    assert [(e.low, e.high) for e in const] == [(0.5, 0.5), (1.0, 1.0)]


# --- generation -----------------------------------------------------------------------------------------


def reference_greedy(model, prompt, stop, steps):
    """Argmax after the whole sequence each step, no cache, no batch: what greedy decoding means."""
    ids, out = list(prompt), []
    for _ in range(steps):
        logits, _ = model(torch.tensor([ids]))
        nxt = int(logits[0, -1].argmax())
        if nxt == stop:
            break
        out.append(nxt)
        ids.append(nxt)
    return out


def common_inner_token(replies):
    """A token that several replies reach after their first token and before their last."""
    counts = {}
    for r in replies:
        for t in set(r[1:-1]):
            counts[t] = counts.get(t, 0) + 1
    return max(counts, key=counts.get)


def test_batched_greedy_equals_one_at_a_time_and_the_uncached_reference():
    model = tiny_gpt()
    prompts = random_prompts(12)
    assert len({len(p) for p in prompts}) > 3  # several lengths in one call
    batched = generate_replies(model, prompts, stop=-1, max_new_tokens=10, batch_size=5)
    alone = [generate_replies(model, [p], stop=-1, max_new_tokens=10)[0] for p in prompts]
    assert batched == alone
    assert [r[0] for r in batched] == [reference_greedy(model, p, -1, 10) for p in prompts]


def test_a_reply_stops_at_its_stop_token_and_the_rest_of_the_batch_goes_on():
    model = tiny_gpt()
    prompts = random_prompts(16, seed=3)
    full = [r[0] for r in generate_replies(model, prompts, stop=-1, max_new_tokens=12)]
    stop = common_inner_token(full)
    cut = [r[0] for r in generate_replies(model, prompts, stop=stop, max_new_tokens=12, batch_size=16)]
    assert cut == [r[: r.index(stop)] if stop in r else r for r in full]
    assert sum(len(c) < len(f) for c, f in zip(cut, full)) >= 2 and any(len(c) == 12 for c in cut)
    assert cut == [reference_greedy(model, p, stop, 12) for p in prompts]


def test_sampled_replies_do_not_depend_on_the_batch_and_equal_gpt_stream():
    model = tiny_gpt()
    prompts = random_prompts(6, seed=5)
    kw = dict(samples=3, temperature=0.9, top_k=5, seed=11, max_new_tokens=8)
    stop = common_inner_token(r for rs in generate_replies(model, prompts, stop=-1, **kw) for r in rs)
    batched = generate_replies(model, prompts, stop=stop, batch_size=4, **kw)
    assert sum(len(r) < 8 for rs in batched for r in rs) >= 3  # sequences left the batch early
    alone = [generate_replies(model, [p], stop=stop, batch_size=1, **kw)[0] for p in reversed(prompts)][::-1]
    assert batched == alone
    assert all(len({tuple(r) for r in rs}) > 1 for rs in batched)  # the samples differ
    assert batched != generate_replies(model, prompts, stop=stop, **{**kw, "seed": 12})
    for p, rs in zip(prompts, batched):  # the same draws as the model's own sampler, one sequence at a time
        for j in range(3):
            g = torch.Generator().manual_seed(sample_seed(11, p, j))
            streamed = [int(t) for t in model.stream(torch.tensor([p]), 8, 0.9, 5, g)]
            assert rs[j] == (streamed[: streamed.index(stop)] if stop in streamed else streamed)


def test_a_reply_ends_where_the_context_is_full():
    model = tiny_gpt(block_size=16)
    out = generate_replies(model, [[1] * 13, [2] * 16], stop=-1, max_new_tokens=10)
    assert [len(r[0]) for r in out] == [4, 1]  # 13 + 4 - 1 = 16 positions fed; 16 + 1 - 1
    with pytest.raises(ValueError, match="prompt 0 is 17 tokens"):
        generate_replies(model, [[1] * 17], stop=-1)
    with pytest.raises(ValueError, match="temperature"):
        generate_replies(model, [[1]], stop=-1, temperature=-1)
    model.train()
    generate_replies(model, [[1, 2]], stop=-1, max_new_tokens=2)
    assert model.training  # left as it was


# --- prompts ---------------------------------------------------------------------------------------------


def test_a_base_prompt_shows_train_examples_in_one_fixed_format():
    test = problems("arithmetic", 3, split="test", seed=0)
    shots = problems("arithmetic", 2, split="train", seed=0)
    text = few_shot_prompt(test[0], shots)
    a, b = shots
    solved = f"{a.question}\nAnswer: {a.answer}\n\n{b.question}\nAnswer: {b.answer}\n\n"
    assert text == f"{solved}{test[0].question}\nAnswer:"
    with pytest.raises(ValueError, match="is a test problem"):
        few_shot_prompt(test[0], [test[1]])
    assert reply_text(None, list(f" {test[0].answer}".encode())) == f"{ANSWER_PREFIX} {test[0].answer}"
    assert grade(test[0], reply_text(None, list(f" {test[0].answer}".encode())))
    chat = prompt_ids(FMT, test[0], shots)
    assert FMT.decode(chat).count("<|assistant|>") == 3 and chat[-1] == FMT.role_id["assistant"]


# --- evaluate_task ---------------------------------------------------------------------------------------


def oracle(right):
    """A stand-in for generate_replies: reply j to prompt i is correct when right(i, j)."""

    def fake(model, prompts, *, stop, samples=1, temperature=0.0, **_):
        answers = [FMT.tokenizer.encode(f"Answer: {p.answer}") for p in fake.problems]
        wrong = FMT.tokenizer.encode("Answer: nothing")
        greedy = temperature == 0
        return [
            [answers[i] if right(i, None if greedy else j) else wrong for j in range(samples)]
            for i in range(len(prompts))
        ]

    return fake


def test_evaluate_task_counts_greedy_and_pass_at_k_from_the_grades(monkeypatch):
    probs = problems("arithmetic", 10, split="test", seed=0)
    fake = oracle(lambda i, j: i < 4 if j is None else j < i)  # greedy: 4 right; problem i: i of 8 samples
    fake.problems = probs
    monkeypatch.setattr(ev, "generate_replies", fake)
    r = evaluate_task(tiny_gpt(), FMT, probs, samples=8, ks=(1, 2, 8), seed=3)
    assert r.greedy_correct == 4 and r.greedy == wilson_interval(4, 10)
    assert r.correct == [min(i, 8) for i in range(10)]
    for k in (1, 2, 8):
        assert r.pass_at[k].value == pytest.approx(sum(pass_at_k(8, c, k) for c in r.correct) / 10)
    assert r.pass_at[1].value < r.pass_at[2].value < r.pass_at[8].value == pytest.approx(0.9)
    assert "greedy accuracy 0.400" in r.summary() and len(r.table().splitlines()) == 2 + 3
    assert r.to_dict()["pass_at"]["8"]["value"] == r.pass_at[8].value


def test_evaluate_task_on_a_real_model_is_seeded_and_does_not_depend_on_the_batch_size():
    model = tiny_gpt(vocab_size=256, block_size=128)
    probs = problems("python", 6, split="test", seed=1, digits=1)
    kw = dict(samples=4, ks=(1, 4), seed=2, shots=2, digits=1, max_new_tokens=6)
    a = evaluate_task(model, None, probs, batch_size=64, **kw)
    b = evaluate_task(model, None, probs, batch_size=2, **kw)
    assert a == b and a.shots == 2 and not a.chat and len(a.replies) == 6
    assert all(r.startswith(ANSWER_PREFIX) for r in a.replies)
    chat = evaluate_task(tiny_gpt(), FMT, probs, samples=2, ks=(1, 2), max_new_tokens=4)
    assert chat.chat and chat.shots == 0 and set(chat.pass_at) == {1, 2}


def test_combine_seeds_gives_the_mean_and_a_t_interval():
    def result(g, p1):
        return TaskResult("arithmetic", 10, True, 0, 0, 4, 1.0, Estimate(g, 0, 1), int(g * 10), [],
                          {1: Estimate(p1, 0, 1), 4: Estimate(p1 + 0.2, 0, 1)})  # fmt: skip

    runs = [result(0.4, 0.30), result(0.5, 0.35), result(0.3, 0.25)]
    out = combine_seeds(runs)
    assert set(out) == {"greedy", "pass@1", "pass@4"}
    assert out["greedy"] == mean_interval([0.4, 0.5, 0.3]) and out["pass@1"].value == pytest.approx(0.30)
    half = t_quantile(0.975, 2) * 0.1 / math.sqrt(3)
    assert (out["greedy"].low, out["greedy"].high) == pytest.approx((0.4 - half, 0.4 + half))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(samples=4, ks=(1, 8)), "pass@k needs 1 <= k <= samples"),
        (dict(samples=4, ks=()), "pass@k needs"),
        (dict(temperature=-0.5), "temperature must be"),
        (dict(shots=-1), "shots must be >= 0"),
        (dict(shots=40, fmt=None), "use fewer shots"),
        (dict(fmt=FMT, vocab_size=256), "fine-tune it for chat first"),
        (dict(problems=[]), "no problems"),
        (dict(problems=problems("arithmetic", 1, split="test") + problems("python", 1, split="test")), "mix tasks"),
    ],
)
def test_bad_settings_are_refused_with_one_line(kwargs, message):
    fmt = kwargs.pop("fmt", FMT)
    model = tiny_gpt(vocab_size=kwargs.pop("vocab_size", 260))
    probs = kwargs.pop("problems", problems("arithmetic", 2, split="test"))
    with pytest.raises(ValueError, match=message):
        evaluate_task(model, fmt, probs, **kwargs)

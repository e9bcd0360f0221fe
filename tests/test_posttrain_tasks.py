"""Chapter 12's synthetic tasks: exact graders, a safe evaluator, and train/test splits that never meet."""

import ast
import itertools
import random

import pytest

from gputrain.posttrain import (
    ChatFormat,
    arithmetic_problem,
    final_answer,
    grade,
    problems,
    python_problem,
    safe_eval,
    split_of,
)
from gputrain.posttrain.tasks import _random_expression


def test_every_one_digit_problem_lands_in_one_split_and_the_generated_splits_cover_the_space_without_meeting():
    space = {arithmetic_problem(a, op, b).canonical for a, op, b in itertools.product(range(10), "+-*", range(10))}
    test = {c for c in space if split_of("arithmetic", c) == "test"}
    assert 0.1 < len(test) / len(space) < 0.3  # about TEST_FRACTION of them
    n_train, n_test = len(space) - len(test), len(test)
    train_set = {p.canonical for p in problems("arithmetic", n_train, split="train", digits=1, ops="+-*")}
    test_set = {p.canonical for p in problems("arithmetic", n_test, split="test", digits=1, ops="+-*", seed=5)}
    assert train_set.isdisjoint(test_set) and train_set | test_set == space and test_set == test


@pytest.mark.parametrize("task", ["arithmetic", "python"])
def test_train_and_test_problems_never_meet_whatever_the_seeds(task):
    train = {p.canonical for seed in range(3) for p in problems(task, 300, split="train", seed=seed)}
    test = {p.canonical for seed in range(3) for p in problems(task, 100, split="test", seed=seed)}
    assert len(train) > 600 and len(test) > 200 and train.isdisjoint(test)
    assert all(split_of(task, c) == "train" for c in train) and all(split_of(task, c) == "test" for c in test)
    # reproducible from the seed
    assert problems(task, 20, split="test", seed=7) == problems(task, 20, split="test", seed=7)


def test_a_commuted_problem_is_the_same_problem():
    a, b = arithmetic_problem(123, "*", 45), arithmetic_problem(45, "*", 123)
    assert a.canonical == b.canonical and a.split == b.split and a.question != b.question
    assert arithmetic_problem(9, "-", 4).canonical != arithmetic_problem(4, "-", 9).canonical


def test_digits_set_the_difficulty():
    for digits in (1, 3, 5):
        ps = problems("arithmetic", 50, split="train", digits=digits, seed=digits)
        operands = [int(t) for p in ps for t in p.canonical.replace("*", " ").replace("+", " ").split()]
        assert max(operands) < 10**digits and max(operands) >= 10 ** (digits - 1)
        assert all(p.answer == eval(p.canonical) for p in ps)  # noqa: S307 -- our own digits


def test_the_grader_reads_the_last_final_answer_exactly():
    p = arithmetic_problem(123, "+", 456)
    assert p.question == "What is 123 + 456?" and p.answer == 579
    assert grade(p, "Answer: 579") and grade(p, "Answer: 12\nno wait. Answer: 579")
    assert not grade(p, "Answer: 578") and not grade(p, "579") and not grade(p, "Answer: 5790")
    assert final_answer("Answer: -6") == -6 and final_answer("no answer") is None
    assert grade(p, p.messages()[-1]["content"])
    enc = ChatFormat().encode(p.messages())
    assert ChatFormat().decode_messages(enc.ids) == p.messages()


def test_safe_eval_agrees_with_python_on_the_generated_expressions():
    rng = random.Random(0)
    for depth in (1, 2, 3):
        for _ in range(300):
            expr = _random_expression(rng, depth, 2)
            # our own generated, trusted text: Python's eval is the reference the grader must match
            code = compile(ast.parse(expr, mode="eval"), "<generated>", "eval")
            assert safe_eval(expr) == eval(code, {"__builtins__": {}, "min": min, "max": max})  # noqa: S307
    p = python_problem("(3+4)*2 - 5%3")
    assert p.question == ">>> (3 + 4) * 2 - 5 % 3" and p.answer == 12 and p.canonical == "(3 + 4) * 2 - 5 % 3"
    assert safe_eval("abs(-7) + min(1, 2, 3)") == 8


@pytest.mark.parametrize(
    "text, says",
    [
        ("__import__('os').system('true')", "Call is not allowed"),
        ("x + 1", "Name is not allowed"),
        ("2 ** 100", "BinOp is not allowed"),
        ("'a' * 3", "Constant is not allowed"),
        ("7 // 0", "division by zero"),
        ("10**9 * 10**9", "BinOp is not allowed"),
        ("1000000000 * 1000000000 * 10", "exceeds"),
        ("1 +", "not a Python expression"),
        ("1" * 201, "at most 200 characters"),
        ("(1).bit_length()", "Call is not allowed"),
    ],
)
def test_safe_eval_refuses_anything_but_integer_arithmetic_in_one_line(text, says):
    with pytest.raises(ValueError) as err:
        safe_eval(text)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_bad_requests_for_problems_get_one_line():
    with pytest.raises(ValueError, match="unknown task 'gsm8k'; use one of: arithmetic, python"):
        problems("gsm8k", 1, split="train")
    with pytest.raises(ValueError, match="split must be 'train' or 'test'"):
        problems("arithmetic", 1, split="val")
    with pytest.raises(ValueError, match="unknown operation '/'"):
        problems("arithmetic", 1, split="train", ops=("+", "/"))
    with pytest.raises(ValueError, match="ask for fewer or raise digits"):
        problems("arithmetic", 500, split="test", digits=1)
    with pytest.raises(ValueError, match="1 <= digits <= 9"):
        problems("arithmetic", 1, split="test", digits=0)

"""Synthetic tasks with exact graders, split into train and test by construction (chapter 12).

Two tasks, each a stream of :class:`Problem` s with one right answer:

* ``arithmetic``: ``What is 123 * 45?``; ``digits`` sets the difficulty.
* ``python``: ``>>> (3 + 4) * 2 - 5 % 3``, the value a Python prompt would
  print.  Python itself computes the reference, by :func:`safe_eval`, which
  walks the parsed expression and allows only integer arithmetic.

A reply is graded by its final answer, the last ``Answer: <integer>`` in it,
against the reference, exactly.  A problem's split is a hash of its canonical
form (operands of ``+`` and ``*`` sorted, so ``2+3`` and ``3+2`` are one
problem), so a problem is a test problem in every run, whatever the seed, and
no training set can contain one.
"""

from __future__ import annotations

import ast
import hashlib
import operator
import random
import re
from dataclasses import dataclass

TASKS = ("arithmetic", "python")
TEST_FRACTION = 0.2  # the share of all problems that belongs to the test split
ANSWER_PREFIX = "Answer:"  # a reply's final answer follows the last one
_ANSWER = re.compile(re.escape(ANSWER_PREFIX) + r"\s*(-?\d+)")
_ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul}
_COMMUTATIVE = {"+", "*"}


@dataclass(frozen=True)
class Problem:
    """One question with its exact answer."""

    task: str  # "arithmetic" or "python"
    question: str  # the user's message
    answer: int  # the reference value
    canonical: str  # the form the split is hashed from

    @property
    def split(self) -> str:
        return split_of(self.task, self.canonical)

    def messages(self) -> list[dict]:
        """The problem as a chat turn with its right reply, for supervised fine-tuning."""
        return [*self.prompt(), {"role": "assistant", "content": f"{ANSWER_PREFIX} {self.answer}"}]

    def prompt(self) -> list[dict]:
        """The problem as the user's turn alone, to ask a model."""
        return [{"role": "user", "content": self.question}]


def split_of(task: str, canonical: str, test_fraction: float = TEST_FRACTION) -> str:
    """``"test"`` or ``"train"``, from a SHA-256 of the task and the problem's canonical form."""
    h = int.from_bytes(hashlib.sha256(f"{task}:{canonical}".encode()).digest()[:8], "big")
    return "test" if h / 2**64 < test_fraction else "train"


def final_answer(reply: str) -> int | None:
    """The integer after the last ``Answer:`` in a reply, or None if there is none."""
    found = _ANSWER.findall(reply)
    return int(found[-1]) if found else None


def grade(problem: Problem, reply: str) -> bool:
    """Whether the reply's final answer is the problem's answer, exactly."""
    return final_answer(reply) == problem.answer


# --- arithmetic ----------------------------------------------------------------------------------


def arithmetic_problem(a: int, op: str, b: int) -> Problem:
    """``a op b`` as a problem; ``op`` is ``+``, ``-`` or ``*``."""
    if op not in _ARITH:
        raise ValueError(f"unknown operation {op!r}; use one of: {', '.join(_ARITH)}")
    x, y = sorted((a, b)) if op in _COMMUTATIVE else (a, b)
    return Problem("arithmetic", f"What is {a} {op} {b}?", _ARITH[op](a, b), f"{x}{op}{y}")


def _random_arithmetic(rng: random.Random, digits: int, ops) -> Problem:
    hi = 10**digits
    return arithmetic_problem(rng.randrange(hi), rng.choice(ops), rng.randrange(hi))


# --- the value of a Python expression -------------------------------------------------------------

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}
_BINOPS |= {ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_CALLS = {"min": min, "max": max, "abs": abs}
_LIMIT = 10**18  # no value may grow past this: the grader never does unbounded work


def safe_eval(expression: str) -> int:
    """The integer value of a small Python expression, computed without ``eval``.

    The expression is parsed with :mod:`ast` and walked; only integer
    literals, unary minus, ``+ - * // %`` and calls of ``min``, ``max`` and
    ``abs`` are allowed.  Anything else (a name, an attribute, ``**``, a
    string) is refused with one line.
    """
    if not isinstance(expression, str) or len(expression) > 200:
        raise ValueError("safe_eval takes an expression string of at most 200 characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not a Python expression: {exc.msg}") from None
    return _value(tree.body)


def _value(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        out = node.value
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        out = -_value(node.operand)
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
            raise ValueError("division by zero in the expression")
        out = _BINOPS[type(node.op)](left, right)
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _CALLS
        and not node.keywords
        and 1 <= len(node.args) <= 4
    ):
        out = _CALLS[node.func.id](*(_value(a) for a in node.args))
    else:
        raise ValueError(f"{type(node).__name__} is not allowed; use integers, + - * // %, min, max, abs")
    if abs(out) > _LIMIT:
        raise ValueError(f"a value in the expression exceeds {_LIMIT:.0e}")
    return out


def _random_expression(rng: random.Random, depth: int, digits: int) -> str:
    """A random expression tree of at most ``depth`` operations, as Python would print it (ast.unparse)."""

    def build(d: int) -> ast.expr:
        if d == 0 or (d < depth and rng.random() < 0.25):  # the top is always an operation
            return ast.Constant(rng.randrange(10**digits))
        if rng.random() < 0.15:
            return ast.Call(ast.Name(rng.choice(("min", "max"))), [build(d - 1), build(d - 1)], [])
        op = rng.choice((ast.Add, ast.Sub, ast.Mult, ast.Mult, ast.FloorDiv, ast.Mod))
        right = build(d - 1)
        if op in (ast.FloorDiv, ast.Mod):
            right = ast.Constant(rng.randrange(1, 10**digits) if digits > 0 else 1)  # never divide by zero
        return ast.BinOp(build(d - 1), op(), right)

    return ast.unparse(build(depth))


def python_problem(expression: str) -> Problem:
    """The value of ``expression`` as a problem; the question is the expression at a Python prompt."""
    canonical = ast.unparse(ast.parse(expression.strip(), mode="eval"))
    return Problem("python", f">>> {canonical}", safe_eval(canonical), canonical)


# --- problem sets --------------------------------------------------------------------------------


def problems(
    task: str, n: int, *, split: str, seed: int = 0, digits: int = 2, ops=("+", "*"), depth: int = 2
) -> list[Problem]:
    """``n`` distinct problems of ``task`` from ``split`` ("train" or "test"), reproducible from ``seed``.

    ``digits``: operand size, the difficulty knob (arithmetic: each operand
    below 10**digits; python: each literal).  ``ops``: arithmetic's
    operations.  ``depth``: python's most nested operations.  Problems of the
    other split are drawn and thrown away, so the two splits never meet.
    """
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; use one of: {', '.join(TASKS)}")
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if not isinstance(digits, int) or not 1 <= digits <= 9 or depth < 1 or n < 0:
        raise ValueError(f"need 1 <= digits <= 9, depth >= 1 and n >= 0; got {digits}, {depth}, {n}")
    for op in ops:
        arithmetic_problem(1, op, 1)  # refuses an unknown operation with one line
    rng = random.Random(f"{task}:{seed}:{split}")
    found: dict[str, Problem] = {}
    for _ in range(50 * n + 1000):
        if len(found) == n:
            break
        if task == "arithmetic":
            p = _random_arithmetic(rng, digits, tuple(ops))
        else:
            try:
                p = python_problem(_random_expression(rng, depth, digits))
            except ValueError:  # a value past the grader's limit: draw another
                continue
        if p.split == split:
            found.setdefault(p.canonical, p)
    if len(found) < n:
        raise ValueError(
            f"only {len(found)} distinct {split} problems of {task} with digits={digits} were found, "
            f"{n} asked; ask for fewer or raise digits"
        )
    return list(found.values())

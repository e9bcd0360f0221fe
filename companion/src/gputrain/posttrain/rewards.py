"""Rewards for rollouts: a task's exact grader, or a user's own Python function, checked reply by reply (chapter 13).

A reward turns replies into one number each.  :func:`task_rewards` is
chapter 12's grader (:func:`~gputrain.posttrain.tasks.grade`): 1 for the
right final answer, 0 otherwise.  :func:`load_reward` loads a user's
function from ``module:function`` or ``path/to/file.py:function``, and
:func:`score_replies` calls it as TRL calls a reward function,
``fn(prompts=..., completions=..., **columns)``, one number per completion.

A bad reward stops the run with one line that names the reply and the fix,
before any gradient sees it: a function that raises, returns the wrong
number of values, or returns a value that is not a finite real number (a
string, None, NaN, infinity).  ``bool`` counts as a number (0 or 1), as a
grader's answer naturally is one.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import numbers
import sys
from pathlib import Path
from typing import Callable, Sequence

import torch

from .tasks import Problem, grade


def task_rewards(problems: Sequence[Problem], replies: Sequence[str]) -> torch.Tensor:
    """(N,) float64: 1.0 where the reply's final answer is its problem's, else 0.0 (exact grading)."""
    if len(problems) != len(replies):
        raise ValueError(f"{len(replies)} replies for {len(problems)} problems; give one problem per reply")
    return torch.tensor([float(grade(p, r)) for p, r in zip(problems, replies)], dtype=torch.float64)


def _import(module: str):
    """A module by dotted name (the working directory searched first) or by the path of a ``.py`` file."""
    if module.endswith(".py"):
        path = Path(module)
        if not path.is_file():
            raise ValueError(f"reward file {module} does not exist; give module:function or path/to/file.py:function")
        spec = importlib.util.spec_from_file_location(f"gputrain_reward_{path.stem}", path)
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
        return loaded
    sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module(module)
    finally:
        sys.path.remove(str(Path.cwd()))


def load_reward(spec: str) -> Callable:
    """The function ``spec`` names, ``module:function`` or ``path/to/file.py:function``; one line if it cannot load."""
    module, sep, name = str(spec).rpartition(":")
    if not sep or not module or not name.isidentifier():
        raise ValueError(f"--reward {spec!r} is not module:function; e.g. --reward my_rewards:length_penalty")
    try:
        loaded = _import(module)
    except ValueError:
        raise
    except Exception as exc:  # any error while importing the user's code, shown on one line
        raise ValueError(f"--reward {spec}: importing {module} failed: {type(exc).__name__}: {_line(exc)}") from None
    fn = getattr(loaded, name, None)
    if not callable(fn):
        raise ValueError(f"--reward {spec}: {module} has no function {name}; check the name after the colon")
    return fn


def _line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200] or "(no message)"


def score_replies(
    fn: Callable, prompts: Sequence[str], completions: Sequence[str], *, name: str | None = None, **columns
) -> torch.Tensor:
    """(N,) float64 rewards from ``fn(prompts=..., completions=..., **columns)``, each checked; one line if bad.

    ``columns``: more per-completion lists the function may read (e.g. the
    problems' ``answers``), as TRL passes a dataset's columns.  ``name``:
    what the error lines call the function (default: its ``__name__``).
    """
    name = name or getattr(fn, "__name__", repr(fn))
    try:
        values = fn(prompts=list(prompts), completions=list(completions), **columns)
    except Exception as exc:  # the user's code: any failure becomes one line
        raise ValueError(
            f"reward {name} raised {type(exc).__name__}: {_line(exc)}; fix the function "
            "(it takes prompts=, completions=, **kwargs and returns one number per completion)"
        ) from None
    try:
        values = list(values)
    except TypeError:
        raise ValueError(
            f"reward {name} returned {type(values).__name__}, not a list; return one number per completion"
        ) from None
    if len(values) != len(completions):
        raise ValueError(f"reward {name} returned {len(values)} values for {len(completions)} completions")
    for i, v in enumerate(values):
        if isinstance(v, torch.Tensor) and v.numel() == 1:
            v = values[i] = v.item()
        if not isinstance(v, numbers.Real):
            raise ValueError(
                f"reward {name} returned {v!r:.40} ({type(v).__name__}) for completion {i}; return a finite number"
            )
        if not math.isfinite(float(v)):
            raise ValueError(f"reward {name} returned {float(v)} for completion {i}; return a finite number")
    return torch.tensor([float(v) for v in values], dtype=torch.float64)

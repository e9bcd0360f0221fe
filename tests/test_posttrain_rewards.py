"""Chapter 13's rewards: the task's grader as a tensor, and a user's module:function reward refused on bad values."""

import sys
import textwrap

import pytest
import torch

from gputrain.posttrain import load_reward, problems, score_replies, task_rewards

USER_MODULE = """
import math

def length(prompts, completions, **kwargs):
    return [len(c) for c in completions]

def right(prompts, completions, answers, **kwargs):
    return [float(c.strip() == str(a)) for c, a in zip(completions, answers)]

def raises(prompts, completions, **kwargs):
    return [1 / 0 for _ in completions]

def nan(prompts, completions, **kwargs):
    return [0.0] * (len(completions) - 1) + [math.nan]

def infinite(prompts, completions, **kwargs):
    return [math.inf for _ in completions]

def text(prompts, completions, **kwargs):
    return ["good" for _ in completions]

def none(prompts, completions, **kwargs):
    return [1.0, None]

def short(prompts, completions, **kwargs):
    return [1.0]

def scalar(prompts, completions, **kwargs):
    return 1.0

NOT_A_FUNCTION = 3
"""


@pytest.fixture
def user_rewards(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.chdir(tmp_path)  # `gputrain rl --reward my_rewards:length` run where the file is
    yield tmp_path
    sys.modules.pop("my_rewards", None)


def test_task_rewards_are_the_exact_grader():
    ps = problems("arithmetic", 3, split="train", seed=1)
    replies = [f"Answer: {ps[0].answer}", "Answer: -1", f"I think... Answer: 0. Answer: {ps[2].answer}"]
    assert ps[1].answer != -1  # sums and products of non-negative operands
    got = task_rewards(ps, replies)
    assert got.dtype == torch.float64 and got.tolist() == [1.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="2 replies for 3 problems"):
        task_rewards(ps, replies[:2])


def test_a_user_reward_loads_by_module_or_by_file_and_gets_the_columns(user_rewards):
    fn = load_reward("my_rewards:length")
    assert score_replies(fn, ["a", "b"], ["xyz", ""]).tolist() == [3.0, 0.0]
    by_file = load_reward(f"{user_rewards / 'my_rewards.py'}:right")
    got = score_replies(by_file, ["q1", "q2"], [" 12", "13"], answers=[12, 14])
    assert got.tolist() == [1.0, 0.0] and got.dtype == torch.float64
    assert score_replies(lambda prompts, completions: [True, False], ["a", "b"], ["x", "y"]).tolist() == [1.0, 0.0]
    assert score_replies(lambda prompts, completions: torch.tensor([0.5, 2.0]), ["a", "b"], ["x", "y"]).tolist() == [
        0.5,
        2.0,
    ]


@pytest.mark.parametrize(
    "name, message",
    [
        ("raises", "reward my_rewards:raises raised ZeroDivisionError: division by zero; fix the function"),
        ("nan", "reward my_rewards:nan returned nan for completion 1; return a finite number"),
        ("infinite", "reward my_rewards:infinite returned inf for completion 0; return a finite number"),
        ("text", "reward my_rewards:text returned 'good' \\(str\\) for completion 0; return a finite number"),
        ("none", "reward my_rewards:none returned None \\(NoneType\\) for completion 1"),
        ("short", "reward my_rewards:short returned 1 values for 2 completions"),
        ("scalar", "reward my_rewards:scalar returned float, not a list"),
    ],
)
def test_a_bad_reward_stops_with_one_line_naming_the_completion(user_rewards, name, message):
    spec = f"my_rewards:{name}"
    with pytest.raises(ValueError, match=f"^{message}") as err:
        score_replies(load_reward(spec), ["p", "q"], ["a", "b"], name=spec)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("my_rewards", "is not module:function"),
        ("my_rewards:", "is not module:function"),
        (":length", "is not module:function"),
        ("my_rewards:no such", "is not module:function"),
        ("my_rewards:missing", "my_rewards has no function missing"),
        ("my_rewards:NOT_A_FUNCTION", "my_rewards has no function NOT_A_FUNCTION"),
        ("no_such_module_here:f", "importing no_such_module_here failed: ModuleNotFoundError"),
        ("missing.py:f", "reward file missing.py does not exist"),
    ],
)
def test_a_reward_that_cannot_load_is_refused_with_one_line(user_rewards, spec, message):
    with pytest.raises(ValueError, match=message) as err:
        load_reward(spec)
    assert "\n" not in str(err.value)


def test_a_module_that_fails_on_import_is_one_line(user_rewards):
    (user_rewards / "broken_reward.py").write_text("import math\nraise RuntimeError('no\\nway')\n")
    with pytest.raises(ValueError, match=r"importing broken_reward failed: RuntimeError: no way$"):
        load_reward("broken_reward:f")
    sys.modules.pop("broken_reward", None)

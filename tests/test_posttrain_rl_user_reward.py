"""Issue 33, item 6: a user's own reward, as module:function or a Python callable, checked before any gradient."""

import textwrap

import pytest
import torch
from helpers import TINY_RL, TINY_RL_RUN, run_cli, tiny_chat_checkpoint

from gputrain.posttrain import GRPOSettings, reinforce

SMALL, FAST = TINY_RL, TINY_RL_RUN
REWARDS = """
import math

def digits(prompts, completions, **columns):
    return [float(any(ch.isdigit() for ch in c)) for c in completions]

def raises(prompts, completions, **columns):
    return [1 / 0 for _ in completions]

def nan(prompts, completions, **columns):
    return [math.nan for _ in completions]

def text(prompts, completions, **columns):
    return ["good" for _ in completions]
"""


@pytest.fixture(scope="module")
def sft(tmp_path_factory):
    return tiny_chat_checkpoint(tmp_path_factory.mktemp("rlreward"))


@pytest.fixture
def rewards_file(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(textwrap.dedent(REWARDS))
    return path


def test_a_python_reward_sees_the_questions_replies_and_answers(sft):
    calls = []

    def judge(prompts, completions, answers, **columns):
        calls.append((prompts, completions, answers))
        return [float(len(c) % 2) for c in completions]

    result = reinforce(sft, settings=GRPOSettings(**SMALL), reward_fn=judge, max_steps=2, **FAST)
    by_question = {p.question: p.answer for p in result.model.problems}
    assert len(by_question) > 16 and all(p.split == "train" for p in result.model.problems)
    assert len(calls) == 3  # the probe before the run, then one call per step
    for prompts, completions, answers in calls[1:]:
        assert len(prompts) == len(completions) == len(answers) == 4 * 4
        assert all(by_question[q] == a for q, a in zip(prompts, answers))
        assert prompts[0::4] == prompts[1::4] == prompts[3::4]  # a group: one question asked G times
    for h, (_, completions, _) in zip(result.model.history, calls[1:]):  # the reward the step recorded is judge's
        assert h["reward"] == pytest.approx(sum(len(c) % 2 for c in completions) / len(completions))


def test_a_module_function_reward_is_stored_and_reloaded_on_resume(sft, tmp_path, rewards_file):
    settings = GRPOSettings(**SMALL, reward=f"{rewards_file}:digits")
    straight = reinforce(sft, settings=settings, max_steps=3, **FAST)
    assert any(h["reward"] > 0 for h in straight.model.history)  # the task's grader gives this model 0
    reinforce(sft, settings=settings, max_steps=1, schedule_steps=3, checkpoint_dir=str(tmp_path / "c"), **FAST)
    assert reinforce(resume_from=str(tmp_path / "c"), max_steps=3).losses == straight.losses


def test_a_python_reward_must_be_given_again_on_resume(sft, tmp_path, rewards_file):
    def digits(prompts, completions, **columns):
        return [float(any(ch.isdigit() for ch in c)) for c in completions]

    straight = reinforce(sft, settings=GRPOSettings(**SMALL), reward_fn=digits, max_steps=3, **FAST)
    folder = str(tmp_path / "c")
    reinforce(sft, settings=GRPOSettings(**SMALL), reward_fn=digits, max_steps=1, schedule_steps=3,
              checkpoint_dir=folder, **FAST)  # fmt: skip
    with pytest.raises(ValueError, match=r"Python function .*digits, which a checkpoint cannot hold"):
        reinforce(resume_from=folder, max_steps=3)
    assert reinforce(resume_from=folder, max_steps=3, reward_fn=digits).losses == straight.losses
    with pytest.raises(ValueError, match="give one reward"):
        reinforce(sft, settings=GRPOSettings(**SMALL, reward=f"{rewards_file}:digits"), reward_fn=digits)


@pytest.mark.parametrize(
    "name, message",
    [
        ("raises", "my_rewards.py:raises raised ZeroDivisionError: division by zero; fix the function"),
        ("nan", "my_rewards.py:nan returned nan for completion 0; return a finite number"),
        ("text", "my_rewards.py:text returned 'good' (str) for completion 0; return a finite number"),
        ("absent", "has no function absent"),
    ],
)
def test_a_bad_reward_is_one_line_exit_2_and_nothing_written(sft, tmp_path, rewards_file, name, message):
    flags = "--n-problems 32 --digits 1 --group-size 4 --max-new-tokens 8 --max-steps 2 --warmup-steps 1"
    flags += " --batch-size 4 --quiet"
    out = tmp_path / "o"
    r = run_cli("rl", "--from", str(sft), *flags.split(), "--reward", f"{rewards_file}:{name}", "--checkpoint-dir",
                str(out))  # fmt: skip
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    assert not out.exists()


def test_a_python_reward_that_breaks_stops_before_any_gradient(sft):
    def broken(prompts, completions, **columns):
        return [None] * len(completions)

    with pytest.raises(ValueError, match=r"reward broken returned None \(NoneType\) for completion 0"):
        reinforce(sft, settings=GRPOSettings(**SMALL), reward_fn=broken, max_steps=1, **FAST)


class ScoreLength(torch.nn.Module):
    """A reward model in Python: an nn.Module with a weight of its own."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(0.1))

    def forward(self, prompts, completions, **columns):
        return [float(self.scale.detach()) * len(c) for c in completions]


def test_a_reward_model_module_is_neither_trained_nor_saved_with_the_policy(sft, tmp_path):
    judge = ScoreLength()
    result = reinforce(sft, settings=GRPOSettings(**SMALL), reward_fn=judge, max_steps=2,
                       checkpoint_dir=str(tmp_path / "c"), **FAST)  # fmt: skip
    assert float(judge.scale.detach()) == pytest.approx(0.1) and judge.scale.grad is None
    assert not any(p is judge.scale for p in result.model.parameters())
    assert not any(name.startswith("reward") for name in result.model.state_dict())
    assert result.model.history[0]["reward"] > 0  # it was the reward


def test_the_rl_command_closes_with_the_rewards_move_and_the_sampled_tokens():
    from gputrain.cli.rl import _rewards_line

    steps = [dict(reward=r, tokens=100, fresh=i % 2 == 0, rollout_seconds=0.5 if i % 2 == 0 else 0.0)
             for i, r in enumerate([0.0] * 10 + [0.5] * 10)]  # fmt: skip
    line = _rewards_line(steps)
    assert line.startswith("rl: mean reward 0.000 -> 0.500 (first and last 2 steps); 1,000 sampled tokens, 200/s")
    assert _rewards_line([]) == "rl: no step ran"

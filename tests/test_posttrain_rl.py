"""Issue 33, items 3 and 6: GRPO runs on the training loop itself: it samples, grades, learns, resumes exactly."""

import math

import pytest
import torch
from helpers import run_cli, tiny_chat_checkpoint

from gputrain.posttrain import GRPOModel, GRPOSettings, load_chat_model, reinforce
from gputrain.train import read_checkpoint

SMALL = GRPOSettings(n_problems=32, digits=1, group_size=4, max_new_tokens=8)
FAST = dict(batch_size=4, warmup_steps=1, progress=False)


@pytest.fixture(scope="module")
def sft(tmp_path_factory):
    return tiny_chat_checkpoint(tmp_path_factory.mktemp("rl"))


def test_a_grpo_step_samples_grades_and_records_what_the_loss_hides(sft):
    result = reinforce(sft, settings=SMALL, max_steps=3, **FAST)
    model: GRPOModel = result.model
    assert result.steps == 3 and len(model.history) == 3
    for h in model.history:
        assert 0 <= h["reward"] <= 1 and 0 <= h["zero_groups"] <= 1 and h["tokens"] > 0
    assert all(math.isfinite(v) for v in result.losses)


def test_a_group_that_scores_alike_teaches_nothing(sft, monkeypatch):
    import gputrain.posttrain.rl as rl

    monkeypatch.setattr(rl, "task_rewards", lambda asked, replies: torch.ones(len(replies), dtype=torch.float64))
    result = reinforce(sft, settings=SMALL, max_steps=2, **FAST)
    assert result.losses == [0.0, 0.0] and result.grad_norms == [0.0, 0.0]  # zero advantage, zero gradient
    assert all(h["zero_groups"] == 1.0 for h in result.model.history)


def test_a_resumed_grpo_run_redraws_the_same_samples(sft, tmp_path):
    settings = GRPOSettings(n_problems=32, digits=1, group_size=4, max_new_tokens=8, beta=0.04)
    straight = reinforce(sft, settings=settings, max_steps=4, **FAST)
    reinforce(sft, settings=settings, max_steps=2, schedule_steps=4, checkpoint_dir=str(tmp_path / "c"), **FAST)
    resumed = reinforce(resume_from=str(tmp_path / "c"), max_steps=4)
    assert resumed.resumed_step == 2 and resumed.losses == straight.losses
    assert read_checkpoint(tmp_path / "c").model_config["posttrain"]["grpo"]["beta"] == 0.04
    policy, fmt = load_chat_model(tmp_path / "c")  # the policy alone, without the reference
    x = torch.tensor([fmt.encode_prompt([{"role": "user", "content": "What is 2 + 3?"}])])
    assert torch.equal(policy(x)[0], resumed.model.policy.eval()(x)[0])


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--group-size", "1"], "group_size must be >= 2"),
        (["--beta", "-0.1"], "beta must be >= 0"),
        (["--ops", "/"], "ops must be made of"),
        (["--algo", "a2c"], "invalid choice: 'a2c'"),
        (["--num-iterations", "0"], "num_iterations must be >= 1"),
    ],
)
def test_bad_rl_settings_are_one_line_exit_2(sft, tmp_path, flags, message):
    r = run_cli("rl", "--from", str(sft), "--checkpoint-dir", str(tmp_path / "o"), *flags)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    assert not (tmp_path / "o").exists()


def test_gputrain_rl_trains_and_saves_a_loadable_policy(sft, tmp_path):
    flags = "--n-problems 32 --digits 1 --group-size 4 --max-new-tokens 8 --max-steps 2 --warmup-steps 1"
    flags += " --batch-size 4 --quiet"
    r = run_cli("rl", "--from", str(sft), *flags.split(), "--checkpoint-dir", str(tmp_path / "rl"))
    assert r.returncode == 0, r.stderr
    assert load_chat_model(tmp_path / "rl")[1] is not None


def test_the_readmes_rl_commands_parse_and_name_every_algorithm():
    import shlex
    from pathlib import Path

    from gputrain.cli import build_parser
    from gputrain.posttrain import ALGOS

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    commands = [line for line in readme.splitlines() if line.startswith("gputrain rl ")]
    assert len(commands) >= 3
    for line in commands:
        args = build_parser().parse_args(shlex.split(line)[1:])  # exits 2 on a flag that no longer exists
        assert args.algo in (None, *ALGOS)
    section = readme[readme.index("**Rewards (chapter 13).**") :].split("**Score a model")[0]
    assert all(f"`{name}`" in section for name in ALGOS)

"""Issue 33, item 6: DPO runs on the training loop itself; its loss starts at ln 2 and the preferred reply gains."""

import json
import math
import re

import pytest
import torch
from helpers import run_cli, snapshot

from gputrain.posttrain import ChatFormat, PreferenceModel, finetune, load_chat_model, prefer, preference_data
from gputrain.train import TrainConfig, read_checkpoint, train

BASE = dict(n_layer=1, n_head=2, n_embd=32, block_size=48, batch_size=4, eval_interval=0, warmup_steps=1)
FAST = dict(batch_size=8, eval_interval=0, warmup_steps=2, progress=False)
PAIRS = [
    {"prompt": f"What is {a} + {b}?", "chosen": f"Answer: {a + b}", "rejected": f"Answer: {a + b + 1}"}
    for a in range(8)
    for b in range(5)
]


@pytest.fixture(scope="module")
def sft(tmp_path_factory):
    root = tmp_path_factory.mktemp("dpo")
    text = root / "code.py"
    text.write_text("def add(a, b):\n    return a + b\n\n" * 300)
    train(TrainConfig(**BASE, data=str(text), max_steps=3, checkpoint_dir=str(root / "base"), progress=False))
    records = [{"prompt": p["prompt"], "response": p["chosen"]} for p in PAIRS]
    finetune(root / "base", records, max_steps=6, checkpoint_dir=str(root / "sft"), **FAST)
    data = root / "pairs.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    return root / "sft", data


def test_pairs_stack_chosen_over_rejected_with_the_same_prompt():
    train_set, val_set = preference_data(PAIRS, ChatFormat(), 48, 0.1, 0)
    x, y = train_set[0]
    assert x.shape == y.shape and x.shape[0] == 2 and len(train_set) + len(val_set) == len(PAIRS)
    prompt_end = (y[0] != -100).nonzero()[0].item()  # the first counted target: the reply starts after it
    assert torch.equal(x[0, : prompt_end + 1], x[1, : prompt_end + 1])  # one user turn, two replies


def test_dpo_starts_at_ln2_and_the_chosen_reply_gains_on_the_rejected(sft, tmp_path):
    ckpt, data = sft
    result = prefer(ckpt, data, beta=0.5, max_steps=20, lr=3e-3, checkpoint_dir=str(tmp_path / "d"), **FAST)
    assert result.losses[0] == pytest.approx(math.log(2), abs=1e-6)  # the policy starts as its reference
    assert result.losses[-1] < result.losses[0]
    model: PreferenceModel = result.model
    x, y = preference_data(PAIRS, ChatFormat(), 48, 0.0001, 0)[0][:]
    policy, reference = model.sequence_logprobs(model.policy, x, y), model.sequence_logprobs(model.reference, x, y)
    margin = (policy[:, 0] - reference[:, 0]) - (policy[:, 1] - reference[:, 1])
    assert margin.mean() > 0  # the implicit reward prefers the chosen replies
    tuned, fmt = load_chat_model(tmp_path / "d")  # the policy alone, loadable as any chat model
    assert torch.equal(tuned(x[:, 0])[0], model.policy.eval()(x[:, 0])[0])
    assert read_checkpoint(tmp_path / "d").model_config["posttrain"]["stage"] == "dpo"


def test_a_resumed_dpo_run_equals_an_uninterrupted_one(sft, tmp_path):
    ckpt, data = sft
    straight = prefer(ckpt, data, lora_rank=2, max_steps=6, **FAST)
    prefer(ckpt, data, lora_rank=2, max_steps=3, schedule_steps=6, checkpoint_dir=str(tmp_path / "c"), **FAST)
    resumed = prefer(resume_from=str(tmp_path / "c"), max_steps=6)
    assert resumed.resumed_step == 3 and resumed.losses == straight.losses


@pytest.mark.parametrize(
    "line, message",
    [
        (
            '{"prompt": "x", "chosen": "y"}',
            r'pairs\.jsonl:2: a preference record needs "prompt", "chosen" and "rejected"',
        ),
        ('{"prompt": "x", "chosen": "y", "rejected": ""}', r'pairs\.jsonl:2: "rejected" must be non-empty text'),
        ("not json", r"pairs\.jsonl:2: not JSON"),
    ],
)
def test_a_malformed_preference_line_is_one_error_naming_file_and_line(sft, tmp_path, line, message):
    ckpt, _ = sft
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps(PAIRS[0]) + "\n" + line + "\n")
    before = snapshot(tmp_path)
    r = run_cli("dpo", "--from", str(ckpt), "--data", str(path), "--checkpoint-dir", str(tmp_path / "o"))
    assert r.returncode == 2 and re.search(message, r.stderr) and len(r.stderr.splitlines()) == 1, r.stderr
    assert snapshot(tmp_path) == before


def test_beta_must_be_positive(sft, tmp_path):
    ckpt, data = sft
    r = run_cli("dpo", "--from", str(ckpt), "--data", str(data), "--beta", "0")
    assert r.returncode == 2 and "--beta must be > 0" in r.stderr

"""Issue 32: supervised fine-tuning runs on the training loop itself, full or LoRA, and refuses bad input."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import as_at_a_terminal, run_cli, snapshot

from gputrain.posttrain import (
    IGNORE,
    ChatExamples,
    ChatFormat,
    finetune,
    load_chat_model,
    lora_layers,
    problems,
)
from gputrain.train import TrainConfig, load_model, read_history, train
from gputrain.train.checkpoint import CheckpointError, read_checkpoint

BASE = dict(
    n_layer=1, n_head=2, n_embd=32, block_size=48, batch_size=4, eval_interval=0, progress=False, warmup_steps=1
)
FAST = dict(batch_size=8, eval_interval=4, eval_batches=2, warmup_steps=2)
THREADS = {"OMP_NUM_THREADS": str(torch.get_num_threads())}  # the subprocesses compute as this one does


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("base")
    text = root / "code.py"
    text.write_text("def add(a, b):\n    return a + b\n\n" * 300)
    train(TrainConfig(**BASE, data=str(text), max_steps=3, checkpoint_dir=str(root / "ckpt")))
    return root / "ckpt"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "sft.jsonl"
    lines = [json.dumps({"messages": p.messages()}) for p in problems("arithmetic", 80, split="train", digits=1)]
    lines += [json.dumps({"prompt": "Say hi.", "response": "hi"})]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_examples_are_padded_so_that_no_pad_is_learned_or_seen():
    fmt = ChatFormat()
    short, long = (
        fmt.encode([{"role": "user", "content": q}, {"role": "assistant", "content": "ok"}])
        for q in ("a", "a much longer question")
    )
    ds = ChatExamples([short, long], fmt)
    (x0, y0), (x1, _) = ds[0], ds[1]
    n = len(short.ids) - 1
    assert x0.shape == x1.shape == (len(long.ids) - 1,)
    assert (x0[n:] == fmt.end_id).all() and (y0[n:] == IGNORE).all()  # pads: never a target
    assert ds.counted_tokens == 2 * len("ok") + 2  # the replies and their <|end|>, nothing else


def test_full_fine_tuning_learns_and_its_checkpoint_loads_back_exactly(base, data, tmp_path):
    result = finetune(base, data, max_steps=12, checkpoint_dir=str(tmp_path / "sft"), **FAST)
    assert result.steps == 12 and result.losses[-1] < result.losses[0]
    model, fmt = load_chat_model(tmp_path / "sft")
    assert fmt is not None and model.cfg.vocab_size == 260
    x = torch.tensor([fmt.encode_prompt([{"role": "user", "content": "What is 2 + 3?"}])])
    assert torch.equal(model(x)[0], result.model.eval()(x)[0])
    with pytest.raises(CheckpointError, match="fine-tuned for chat; load it with gputrain.posttrain"):
        load_model(tmp_path / "sft")


def test_lora_trains_only_the_adapters_and_leaves_every_base_weight(base, data, tmp_path):
    before = read_checkpoint(base).weights
    result = finetune(base, data, lora_rank=2, max_steps=8, checkpoint_dir=str(tmp_path / "lora"), **FAST)
    layers = lora_layers(result.model)
    assert len(layers) == 4 and all(layer.r == 2 and layer.scale == 2.0 for layer in layers.values())
    state = result.model.state_dict()
    for name, w in before.items():
        key = name if name in state else name.replace(".weight", ".base.weight").replace(".bias", ".base.bias")
        if name != "wte.weight":  # grown by four rows, which stay at their initial values
            assert torch.equal(state[key], w), name
    assert torch.equal(state["wte.weight"][:256], before["wte.weight"])
    assert any(layer.lora_B.abs().sum() > 0 for layer in layers.values())  # B left zero: it learned
    ckpt = read_checkpoint(tmp_path / "lora")
    assert ckpt.model_config["posttrain"]["lora"] == {
        "r": 2, "alpha": 4, "targets": ["attn.qkv", "attn.proj", "mlp.fc", "mlp.proj"]
    }  # fmt: skip
    merged, fmt = load_chat_model(tmp_path / "lora")
    x = torch.tensor([fmt.encode_prompt([{"role": "user", "content": "What is 2 + 3?"}])])
    torch.testing.assert_close(merged(x)[0], result.model.eval()(x)[0], rtol=1e-5, atol=1e-5)  # merged: W + BA


def test_a_resumed_fine_tune_equals_an_uninterrupted_one(base, data, tmp_path):
    straight = finetune(base, data, lora_rank=2, max_steps=8, **FAST)
    # stopped at step 4 of a schedule 8 steps long, then continued to step 8 with the settings it saved
    first = finetune(base, data, lora_rank=2, max_steps=4, schedule_steps=8, checkpoint_dir=str(tmp_path / "c"), **FAST)
    assert first.steps == 4
    resumed = finetune(resume_from=str(tmp_path / "c"), max_steps=8)
    assert resumed.resumed_step == 4 and resumed.losses == straight.losses  # exact, step by step


BAD_LINES = {
    "not JSON": ("{'messages': 1}", r"sft\.jsonl:2: not JSON"),
    "missing key": ('{"prompt": "2+2?"}', r'sft\.jsonl:2: the record has no "response"'),
    "unknown role": (
        '{"messages": [{"role": "bot", "content": "x"}]}',
        r"sft\.jsonl:2: message 1 has unknown role 'bot'",
    ),
    "empty response": ('{"prompt": "2+2?", "response": ""}', r"sft\.jsonl:2: message 2 \(assistant\) has empty"),
    "too long": ('{"prompt": "' + "x" * 80 + '", "response": "y"}', r"sft\.jsonl:2: the conversation is \d+ tokens"),
}


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_a_bad_line_is_one_error_naming_file_and_line_and_nothing_is_written(base, tmp_path, case):
    line, message = BAD_LINES[case]
    path = tmp_path / "sft.jsonl"
    path.write_text('{"prompt": "1+1?", "response": "Answer: 2"}\n' + line + "\n")
    before = snapshot(tmp_path)
    out = tmp_path / "out"
    r = run_cli("sft", "--from", str(base), "--data", str(path), "--checkpoint-dir", str(out), env=THREADS)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and re.search(message, r.stderr), r.stderr
    assert not out.exists() and snapshot(tmp_path) == before


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--lora-rank", "0"], "--lora-rank must be >= 1"),
        (["--lora-rank", "40"], r"LoRA rank r=40 does not fit blocks\.0\.attn\.qkv \(32 -> 96\)"),
        (["--lora-alpha", "8"], "--lora-alpha needs --lora-rank"),
    ],
)
def test_a_bad_lora_setting_is_refused_before_anything_runs(base, data, tmp_path, flags, message):
    r = run_cli("sft", "--from", str(base), "--data", str(data), "--checkpoint-dir", str(tmp_path / "o"), *flags)
    assert r.returncode == 2 and re.search(message, r.stderr), r.stderr
    assert not (tmp_path / "o").exists()


def test_from_must_be_a_checkpoint(data, tmp_path):
    (tmp_path / "empty").mkdir()
    r = run_cli("sft", "--from", str(tmp_path / "empty"), "--data", str(data))
    assert r.returncode == 2 and "no checkpoint in" in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr


@pytest.mark.multiprocess
def test_sigterm_saves_after_the_step_and_the_cli_resume_is_bit_exact(base, data, tmp_path):
    flags = ["--lora-rank", "2", "--max-steps", "400", "--batch-size", "8", "--eval-interval", "0", "--no-progress"]
    straight = finetune(base, data, lora_rank=2, max_steps=400, batch_size=8, eval_interval=0, progress=False)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputrain", "sft", "--from", str(base), "--data", str(data), *flags]
        + ["--checkpoint-dir", str(tmp_path / "c"), "--log-dir", str(tmp_path / "l")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **THREADS},
        preexec_fn=as_at_a_terminal,
    )
    log, deadline = tmp_path / "l" / "metrics.csv", time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if log.exists() and len(log.read_text().splitlines()) > 5:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "gputrain sft: SIGTERM: stopped after step" in err.strip().splitlines()[-1]
    step = read_checkpoint(tmp_path / "c").step
    assert 5 <= step < 400
    r = run_cli("sft", "--resume-from", str(tmp_path / "c"), "--quiet", env=THREADS)
    assert r.returncode == 0, r.stderr
    logged = [float(v) for v in read_history(log)["loss"]]
    assert logged == straight.losses  # every step's loss, before and after the signal, bit for bit
    resumed, _ = load_chat_model(tmp_path / "c")
    assert read_checkpoint(tmp_path / "c").step == 400 and resumed.cfg.vocab_size == 260


def test_the_resume_refuses_a_new_base_data_or_adapter(tmp_path):
    r = run_cli("sft", "--resume-from", str(tmp_path), "--data", "x.jsonl")
    assert r.returncode == 2 and "a resumed run keeps the base, data and adapters" in r.stderr


def test_sft_without_from_or_data_names_both(tmp_path):
    r = run_cli("sft", "--data", str(tmp_path / "x.jsonl"))
    assert r.returncode == 2 and "give --from CKPT" in r.stderr
    assert Path(tmp_path).exists() and not list(tmp_path.iterdir())

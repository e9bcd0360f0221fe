"""``gputrain eval --task`` (accuracy and pass@k) and ``gputrain sample --chat`` (one chat turn), chapter 12."""

import json

import pytest
import torch
from helpers import run_cli, snapshot

import gputrain.posttrain as posttrain
from gputrain.cli import main
from gputrain.model import GPT, GPTConfig
from gputrain.posttrain import ChatFormat, evaluate_task, finetune, generate_replies, load_chat_model, problems
from gputrain.train import TrainConfig, train

THREADS = {"OMP_NUM_THREADS": str(torch.get_num_threads())}  # the subprocesses compute as this one does


def tiny(vocab_size):
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=vocab_size, block_size=96, n_layer=1, n_head=2, n_embd=32)).eval()


@pytest.fixture
def checkpoints(monkeypatch):
    """``chat`` loads a chat model with its format, ``base`` a pretrained one without (as load_chat_model does)."""
    models = {"chat": (tiny(260), ChatFormat()), "base": (tiny(256), None)}
    monkeypatch.setattr(posttrain, "load_chat_model", lambda checkpoint: models[str(checkpoint)], raising=False)
    return models


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_eval_task_prints_what_evaluate_task_measures(checkpoints, capsys):
    code, out, err = run(capsys, "eval", "--task", "arithmetic", "--checkpoint", "chat", "--problems", "5",
                         "--samples", "4", "--seed", "2", "--json")  # fmt: skip
    assert code == 0, err
    got = json.loads(out)
    model, fmt = checkpoints["chat"]
    want = evaluate_task(model, fmt, problems("arithmetic", 5, split="test", seed=2), samples=4, ks=(1, 2, 4), seed=2)
    assert got["pass_at"] == {str(k): vars(e) for k, e in want.pass_at.items()}
    assert got["greedy_correct"] == want.greedy_correct and got["correct"] == want.correct
    assert got["chat"] and got["shots"] == 0 and got["checkpoint"] == "chat" and got["digits"] == 2

    code, out, err = run(capsys, "eval", "--task", "python", "--checkpoint", "base", "--problems", "4",
                         "--samples", "2", "--digits", "1", "--shots", "2")  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("python (base, 2-shot), 4 problems, seed 0; greedy accuracy ")
    assert "pass@1 " in lines[0] and "pass@2 " in lines[0] and lines[1].startswith("pass@k from 2 samples")
    assert len(lines) == 2 + 1 + 2  # summary, table head, column names, k = 1 and 2


def test_eval_ops_asks_only_those_operations(checkpoints, capsys):
    code, out, err = run(capsys, "eval", "--task", "arithmetic", "--checkpoint", "chat", "--problems", "6",
                         "--samples", "0", "--ops", "+", "--json")  # fmt: skip
    assert code == 0, err
    got = json.loads(out)
    model, fmt = checkpoints["chat"]
    asked = problems("arithmetic", 6, split="test", seed=0, ops=("+",))
    assert all("+" in p.question and "*" not in p.question for p in asked) and got["ops"] == "+"
    assert got["greedy_correct"] == evaluate_task(model, fmt, asked, samples=0, ks=()).greedy_correct


def test_eval_task_without_samples_reports_greedy_accuracy_only(checkpoints, capsys):
    code, out, err = run(capsys, "eval", "--task", "arithmetic", "--checkpoint", "base", "--problems", "3",
                         "--samples", "0", "--shots", "1")  # fmt: skip
    assert code == 0, err
    assert out.count("\n") == 1 and "greedy accuracy" in out and "pass@" not in out


def test_sample_chat_prints_the_reply_of_one_chat_turn(checkpoints, capsys):
    code, out, err = run(capsys, "sample", "--chat", "--checkpoint", "chat", "--prompt", "What is 2 + 3?",
                         "--temperature", "0", "--tokens", "6")  # fmt: skip
    assert code == 0, err
    model, fmt = checkpoints["chat"]
    ids = fmt.encode_prompt([{"role": "user", "content": "What is 2 + 3?"}])
    reply = generate_replies(model, [ids], stop=fmt.end_id, max_new_tokens=6)[0][0]
    assert out == fmt.reply(reply) + "\n"
    code, out, err = run(capsys, "sample", "--chat", "--checkpoint", "chat", "--prompt", "Hi", "--num-samples", "2",
                         "--tokens", "5")  # fmt: skip
    assert code == 0 and out.count("---------------") == 1, err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["eval", "--task", "chess", "--checkpoint", "chat"], "invalid choice: 'chess'"),
        (["eval", "--task", "arithmetic", "--checkpoint", "chat", "--samples", "4", "--k", "1,8"], "lower k"),
        (["eval", "--task", "arithmetic", "--checkpoint", "chat", "--k", "1,x"], "--k takes whole numbers"),
        (["eval", "--task", "arithmetic", "--checkpoint", "chat", "--samples", "0", "--k", "1"], "--k needs"),
        (["eval", "--task", "arithmetic", "--checkpoint", "chat", "--problems", "0"], "--problems must be >= 1"),
        (["eval", "--task", "arithmetic", "--checkpoint", "chat", "--digits", "0"], "digits"),
        (["eval", "--task", "arithmetic", "--checkpoint", "chat", "--ops", "/"], "--ops takes arithmetic's"),
        (["eval", "--task", "arithmetic", "--checkpoint", "chat", "--temperature", "-1"], "temperature must be"),
        (["eval", "--task", "arithmetic", "--checkpoint", "base", "--shots", "9"], "use fewer shots"),
        (["eval", "--task", "arithmetic", "--checkpoint", "chat", "--data", "x.txt"], "leave it out with --task"),
        (["eval", "--checkpoint", "chat", "--samples", "4"], "add --task (arithmetic or python)"),
        (["sample", "--chat", "--checkpoint", "base", "--prompt", "Hi"], "gputrain sft --from base"),
        (["sample", "--chat", "--checkpoint", "chat"], "--chat needs the user's message"),
        (["sample", "--chat", "--checkpoint", "chat", "--prompt", "x" * 200], "leaves no room for a reply"),
        (["sample", "--chat", "--checkpoint", "chat", "--prompt", "Hi", "--tokens", "0"], "must be >= 1"),
    ],
)
def test_bad_input_is_one_line_exit_2(checkpoints, capsys, argv, message):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refuses a flag's value before main runs the command
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err, err


# --- on real checkpoints, through the command line ------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A pretrained checkpoint and a chat checkpoint fine-tuned from it (a few steps: shapes, not skill)."""
    root = tmp_path_factory.mktemp("evaltask")
    text = root / "code.py"
    text.write_text("def add(a, b):\n    return a + b\n\n" * 300)
    shape = dict(n_layer=1, n_head=2, n_embd=32, block_size=64, batch_size=4, eval_interval=0, progress=False)
    train(TrainConfig(**shape, data=str(text), max_steps=3, warmup_steps=1, checkpoint_dir=str(root / "base")))
    records = [{"messages": p.messages()} for p in problems("arithmetic", 40, split="train", digits=1)]
    finetune(str(root / "base"), records, max_steps=3, warmup_steps=1, eval_interval=0, progress=False,
             batch_size=4, checkpoint_dir=str(root / "sft"))  # fmt: skip
    return root


def test_eval_task_and_sample_chat_on_checkpoints(trained):
    sft, base = trained / "sft", trained / "base"
    before = snapshot(trained)
    out = run_cli("eval", "--task", "arithmetic", "--checkpoint", str(sft), "--problems", "6", "--samples", "4",
                  "--digits", "1", "--json", env=THREADS)  # fmt: skip
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    model, fmt = load_chat_model(sft)
    want = evaluate_task(model, fmt, problems("arithmetic", 6, split="test", digits=1), samples=4, ks=(1, 2, 4),
                         digits=1)  # fmt: skip
    assert got["replies"] == want.replies and got["correct"] == want.correct and got["chat"]
    out = run_cli("eval", "--task", "arithmetic", "--checkpoint", str(base), "--problems", "3", "--samples", "0",
                  "--digits", "1", "--shots", "1", env=THREADS)  # fmt: skip
    assert out.returncode == 0 and out.stdout.startswith("arithmetic (base, 1-shot), 3 problems"), out.stderr
    out = run_cli("sample", "--chat", "--checkpoint", str(sft), "--prompt", "What is 2 + 3?", "--temperature", "0",
                  "--tokens", "8", env=THREADS)  # fmt: skip
    ids = fmt.encode_prompt([{"role": "user", "content": "What is 2 + 3?"}])
    assert out.returncode == 0 and out.stdout == fmt.reply(generate_replies(model, [ids], stop=fmt.end_id,
                                                                            max_new_tokens=8)[0][0]) + "\n"  # fmt: skip
    out = run_cli("sample", "--chat", "--checkpoint", str(base), "--prompt", "Hi")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and f"gputrain sft --from {base}" in out.stderr
    out = run_cli("eval", "--checkpoint", str(base), "--max-batches", "1")  # the loss on text, as before
    assert out.returncode == 0 and "bits/byte" in out.stdout, out.stderr
    assert snapshot(trained) == before  # evaluating writes nothing

"""Issue 23, items 1 and 2: a resume restores the run from its checkpoint; Ctrl-C and SIGTERM save it.

Every test here failed before: a resume took its settings from the command
line (a forgotten --data trained on other text), extended runs rescaled their
schedule, a finished run crashed, and a signal killed the run without a save.
"""

import csv
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import SMALL_GPT, accelerate_launch, as_at_a_terminal, cli_flags, snapshot
from safetensors import safe_open
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from gputrain import train as T
from gputrain.cli import main
from gputrain.train import checkpoint as C
from gputrain.train.rundir import LOCK_NAME

FIELDS = dict(SMALL_GPT, corpus_bytes=20_000, warmup_steps=2, eval_interval=5, eval_batches=2, dropout=0.1)
STEPS = 10


def call(argv) -> int:
    try:
        return main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's own usage errors
        return exc.code


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished 10-step run on a text file of its own, with checkpoints and a log, all by relative paths."""
    root = tmp_path_factory.mktemp("run")
    (root / "text.txt").write_text("def double(x):\n    return 2 * x\n\n" * 1500)
    here = os.getcwd()
    os.chdir(root)
    try:
        flags = cli_flags(**FIELDS, data="text.txt", max_steps=STEPS, checkpoint_dir="c", log_dir="l")
        assert call(["train", *flags, "--quiet"]) == 0
    finally:
        os.chdir(here)
    return root


@pytest.fixture
def run(finished_run, tmp_path, monkeypatch):
    """A private copy of the finished run, the working directory inside it (its stored paths are relative)."""
    for name in ("c", "l", "text.txt"):
        src = finished_run / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def rows(log: Path) -> list[str]:
    return log.read_text().splitlines()


def stored_config(path) -> dict:
    return C.read_checkpoint(path).meta["run"]["config"]


def test_a_resume_takes_the_data_and_every_setting_from_the_checkpoint(run, capsys):
    """It used to train on 'stdlib' when --data was forgotten (loss 1.6 -> 7.3, exit 0)."""
    code = call(["train", "--resume-from", run / "c", "--max-steps", 12, "--checkpoint-dir", run / "c"])
    out = capsys.readouterr().out
    assert code == 0, out
    saved = stored_config(run / "c")
    assert C.read_checkpoint(run / "c").step == 12
    for name, value in FIELDS.items():
        assert saved[name] == value, name
    assert saved["data"] == "text.txt"  # not the default 'stdlib'
    assert "Resumed from step 10 of 12" in out


def test_safe_flags_override_with_one_line_per_field(run, capsys):
    argv = ["--resume-from", run / "c", "--checkpoint-dir", run / "c", "--log-dir", run / "l2"]
    code = call(["train", *argv, "--max-steps", 12, "--eval-interval", 3, "--no-progress"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0, out
    assert "max_steps: 10 -> 12" in out and "eval_interval: 5 -> 3" in out
    assert any(re.fullmatch(r"log_dir: 'l' -> '.*/l2'", line) for line in out), out
    assert not any(line.startswith("checkpoint_dir") for line in out)  # the same directory, spelled otherwise
    assert any(line.startswith("schedule_steps: 0 -> 10 (the schedule keeps its 10 steps") for line in out), out
    assert out[-2] == "Resumed from step 10 of 12" and out[-1].startswith("trained 12 steps")


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--data", "stdlib"], "--data stdlib"),
        (["--batch-size", "4"], "--batch-size 4"),
        (["--lr", "1e-3", "--seed", "7"], "--seed 7, --lr 0.001"),  # in the order of TrainConfig
        (["--val-fraction", "0.2"], "--val-fraction 0.2"),
    ],
)
def test_a_change_of_what_the_run_computes_is_refused_naming_the_flag(run, capsys, flags, named):
    before = snapshot(run)
    code = call(["train", "--resume-from", run / "c", "--checkpoint-dir", run / "c", "--log-dir", run / "l", *flags])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"resuming with {named} would change what the run computes" in err
    assert "--allow-config-change" in err
    assert snapshot(run) == before


def test_allow_config_change_applies_the_new_learning_rate(run, capsys):
    argv = ["--resume-from", run / "c", "--checkpoint-dir", run / "c", "--log-dir", run / "l", "--max-steps", 12]
    assert call(["train", *argv, "--lr", "1e-3", "--allow-config-change", "--quiet"]) == 0
    lrs = [float(r["lr"]) for r in csv.DictReader(open(run / "l" / "metrics.csv"))]
    saved = stored_config(run / "c")
    f = T.lr_lambda(T.TrainConfig(**{**saved, "resume_from": ""}))
    assert lrs[10:] == pytest.approx([1e-3 * f(10), 1e-3 * f(11)])  # the new rate, on the kept schedule
    assert saved["lr"] == 1e-3 and saved["schedule_steps"] == STEPS


def test_a_larger_max_steps_keeps_the_schedule(run, capsys):
    """It used to stretch the cosine over the new length: the rate jumped 3.4x at the resume."""
    assert call(["train", "--resume-from", run / "c", "--max-steps", 16, "--log-dir", run / "l", "--quiet"]) == 0
    lrs = [float(r["lr"]) for r in csv.DictReader(open(run / "l" / "metrics.csv"))]
    final = 3e-3 * 0.1  # lr * min_lr_ratio: where the checkpoint's 10-step cosine ends
    assert lrs[10:] == pytest.approx([final] * 6)
    assert lrs[9] > final  # the original schedule up to the resume
    help_text = subprocess.run(
        [sys.executable, "-m", "gputrain", "train", "--help"], capture_output=True, text=True
    ).stdout
    assert "A larger --max-steps keeps the checkpoint's schedule" in " ".join(help_text.split())


def test_the_library_refuses_a_stretched_schedule_unless_told(run):
    cfg = dict(stored_config(run / "c"), resume_from=str(run / "c"), checkpoint_dir=str(run / "c"), log_dir="")
    cfg["progress"] = False
    with pytest.raises(
        C.CheckpointError,
        match="max_steps=14 would stretch .* pass schedule_steps=10 to keep it .* allow_config_change=True to",
    ):
        T.train(T.TrainConfig(**{**cfg, "max_steps": 14}))
    assert T.train(T.TrainConfig(**{**cfg, "max_steps": 14, "schedule_steps": STEPS})).steps == 14


def test_a_constant_schedule_resumes_longer_from_python_and_errors_name_fields(tmp_path):
    """Issue 30: a constant schedule was refused as 'stretched', with advice in flags a Python caller has none of."""
    fields = dict(FIELDS, eval_interval=0, schedule="constant", checkpoint_dir=str(tmp_path / "c"), progress=False)
    assert T.train(T.TrainConfig(**fields, max_steps=3)).steps == 3
    resumed = T.train(T.TrainConfig(**fields, max_steps=5, resume_from=str(tmp_path / "c")))
    assert resumed.steps == 5 and resumed.lrs[3:] == [3e-3] * 2  # the default lr: the same flat rate
    again = dict(fields, resume_from=str(tmp_path / "c"), max_steps=7)
    with pytest.raises(C.CheckpointError, match=r"resuming with lr=0\.001 would change .* allow_config_change=True$"):
        T.train(T.TrainConfig(**again, lr=1e-3))


def test_resuming_a_copy_never_writes_into_the_original_runs_log(run, capsys):
    """Issue 30: a copy's checkpoint_dir followed the copy, its log_dir did not: it rewrote the original's log."""
    shutil.copytree(run / "c", run / "copy")
    before = snapshot(run)
    code = call(["train", "--resume-from", run / "copy", "--max-steps", 12])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "resuming this copy would rewrite that run's log; pass --log-dir DIR" in err
    assert snapshot(run) == before
    assert call(["train", "--resume-from", run / "copy", "--max-steps", 12, "--log-dir", run / "l2", "--quiet"]) == 0
    assert snapshot(run / "l") == {p: b for p, b in before.items() if p.is_relative_to(run / "l")}
    assert len(rows(run / "l2" / "metrics.csv")) == 13 and C.read_checkpoint(run / "copy").step == 12


def rewrite_run(checkpoint, **changes):
    """Make a checkpoint say other things about its run (None: drop the key), still passing verification."""
    path = C.find_checkpoint(checkpoint)
    blob = (path / "trainer.safetensors").read_bytes()
    with safe_open(path / "trainer.safetensors", framework="pt") as f:
        meta = json.loads(f.metadata()["gputrain"])
    for key, value in changes.items():
        meta["run"].pop(key) if value is None else meta["run"].__setitem__(key, value)
    data = st_save(st_load(blob), metadata={"gputrain": json.dumps(meta)})
    (path / "trainer.safetensors").write_bytes(data)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["sha256"]["trainer.safetensors"] = hashlib.sha256(data).hexdigest()
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_a_checkpoint_of_two_processes_does_not_resume_in_one_unless_told(run, capsys):
    """Issue 30: it resumed silently, the global batch halved and the data position was read in the wrong units."""
    assert C.read_checkpoint(run / "c").meta["run"]["world_size"] == 1
    rewrite_run(run / "c", world_size=2)
    batch = C.read_checkpoint(run / "c").meta["progress"]["batch"]
    before = snapshot(run)
    code = call(["train", "--resume-from", run / "c", "--max-steps", 12])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "was trained by 2 processes, this run has 1: the global batch would change from 16 to 8 windows" in err
    assert "--allow-config-change" in err and snapshot(run) == before
    assert call(["train", "--resume-from", run / "c", "--max-steps", 12, "--allow-config-change"]) == 0
    assert "processes: 2 -> 1 (the global batch changes from 16 to 8 windows per step" in capsys.readouterr().out
    after = C.read_checkpoint(run / "c").meta
    assert after["run"]["world_size"] == 1 and after["progress"]["batch"] == 2 * batch + 2  # the same windows done


def test_a_checkpoint_older_than_world_size_and_data_hash_still_resumes(run):
    rewrite_run(run / "c", world_size=None, data_sha256=None)
    assert call(["train", "--resume-from", run / "c", "--max-steps", 12, "--quiet"]) == 0
    assert C.read_checkpoint(run / "c").meta["run"]["world_size"] == 1


def test_a_resume_on_changed_text_is_refused_unless_told(run, capsys):
    """Issue 30: a data file whose content changed was used, with only 'cache rebuilt' to say so."""
    text = (run / "text.txt").read_text()
    (run / "text.txt").write_text(text.replace("double", "triple"))
    before = snapshot(run)
    code = call(["train", "--resume-from", run / "c", "--max-steps", 12])
    err = capsys.readouterr().err
    assert code == 2 and err.strip().splitlines()[-1].startswith("gputrain train: error: the text of data='text.txt'")
    assert "is not the text checkpoint" in err and "--allow-config-change" in err and snapshot(run) == before
    assert call(["train", "--resume-from", run / "c", "--max-steps", 12, "--allow-config-change", "--no-progress"]) == 0
    err = capsys.readouterr().err  # said without a progress bar too
    assert "gputrain: data: the text of data='text.txt' is not the text" in err
    assert "continuing on the new text (allowed by --allow-config-change)" in err


def test_resuming_a_finished_run_is_a_one_line_no_op(run, capsys):
    """It used to crash with OSError: Directory not empty and leave a .tmp behind."""
    before = snapshot(run)
    for argv in (["--resume-from", run / "c"], ["--resume-from", run / "c" / "step_00000010", "--no-progress"]):
        code = call(["train", *argv])
        out = capsys.readouterr()
        assert code == 0 and out.err == ""
        assert out.out.count("\n") == 1 and "is at step 10 of 10: the run is finished" in out.out
    assert snapshot(run) == before
    result = T.train(T.TrainConfig(**{**stored_config(run / "c"), "resume_from": str(run / "c"), "progress": False}))
    assert result.nothing_to_do and result.steps == STEPS and snapshot(run) == before  # the library: no crash either


def test_resume_without_checkpoint_dir_keeps_saving_where_it_read(run):
    """It used to save nothing and report the checkpoint's stale validation loss."""
    assert call(["train", "--resume-from", run / "c", "--max-steps", 12, "--quiet"]) == 0
    assert [p.name for p in C.list_checkpoints(run / "c")] == ["step_00000010", "step_00000012"]


def test_metrics_keep_the_rows_already_logged(run):
    """Rows up to the checkpoint are kept as written (tokens/s included); rows past it are trained again."""
    log = run / "l" / "metrics.csv"
    kept = rows(log)
    with open(log, "a") as f:  # a run killed after its checkpoint logged steps 11-13, then died
        f.write("11,0.1,99.5,,0.001,1.0,5.0,\n12,0.1,99.5,,0.001,1.0,5.0,\n13,0.1")
    argv = ["--resume-from", run / "c", "--checkpoint-dir", run / "c", "--log-dir", run / "l", "--max-steps", 12]
    assert call(["train", *argv, "--quiet"]) == 0
    after = rows(log)
    assert after[: len(kept)] == kept and all(r.split(",")[6] for r in kept[1:])  # tokens/s survived
    assert [r.split(",")[0] for r in after[1:]] == [str(s) for s in range(1, 13)]  # no step twice
    assert ",99.5," not in log.read_text()


# --- Ctrl-C and SIGTERM ----------------------------------------------------------------------

SIGNAL_FIELDS = dict(FIELDS, data="stdlib", corpus_bytes=30_000, max_steps=300, eval_interval=50)
THREADS = {"OMP_NUM_THREADS": str(torch.get_num_threads())}  # the same arithmetic as this process: bit for bit


@pytest.fixture(scope="module")
def straight():
    return T.train(T.TrainConfig(**SIGNAL_FIELDS, progress=False))


def start(tmp_path, script: str = "", extra=()) -> subprocess.Popen:
    flags = cli_flags(**SIGNAL_FIELDS, checkpoint_dir=tmp_path / "c", log_dir=tmp_path / "l")
    argv = ["-m", "gputrain", "train"] if not script else ["-c", script]
    return subprocess.Popen(
        [sys.executable, *argv, *flags, *extra, "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **THREADS},
        preexec_fn=as_at_a_terminal,
    )


def wait_for_rows(log: Path, n: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if log.exists() and len(log.read_text().splitlines()) > n:
            return
        time.sleep(0.02)
    raise AssertionError(f"no {n} steps logged: {proc.poll()} {proc.stderr.read()[-2000:] if proc.stderr else ''}")


@pytest.mark.multiprocess
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_saves_after_the_step_and_the_resume_is_bit_exact(tmp_path, straight, sig):
    proc = start(tmp_path)
    wait_for_rows(tmp_path / "l" / "metrics.csv", 8, proc)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + sig, err[-2000:]
    lines = err.strip().splitlines()
    match = re.fullmatch(
        rf"gputrain train: {sig.name}: stopped after step (\d+); saved checkpoint '(.*)'; .*", lines[-1]
    )
    assert match, err[-2000:]
    step = int(match.group(1))
    assert 8 <= step < SIGNAL_FIELDS["max_steps"] and Path(match.group(2)) == C.checkpoint_path(tmp_path / "c", step)
    assert C.read_checkpoint(tmp_path / "c").step == step  # the newest checkpoint is that step's, and intact
    assert len(rows(tmp_path / "l" / "metrics.csv")) == step + 1  # the log was closed with every step in it
    assert not list(tmp_path.rglob(LOCK_NAME)) and not list(tmp_path.rglob(".step_*"))
    assert call(["train", "--resume-from", tmp_path / "c", "--quiet"]) == 0  # everything else from the checkpoint
    resumed, _ = T.load_model(tmp_path / "c")
    logged = [float(v) for v in T.read_history(tmp_path / "l" / "metrics.csv")["loss"]]
    assert logged == straight.losses  # exact float equality at every step, before and after the signal
    a, b = straight.model.state_dict(), resumed.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    print(f"{sig.name} after step {step}, resumed to {len(logged)}: every loss and weight equal, bit for bit")


SLOW_SAVE = r"""
import sys, time
from pathlib import Path
import gputrain.train.checkpoint as C
from gputrain.cli import main

write = C._write_checkpoint

def slow(tmp, *args):
    (Path(tmp).parents[1] / "saving").write_text("")  # tell the test, then take long enough to be interrupted
    time.sleep(60)
    write(tmp, *args)

C._write_checkpoint = slow
raise SystemExit(main(["train", *sys.argv[1:]]))
"""


@pytest.mark.multiprocess
def test_a_second_ctrl_c_stops_at_once(tmp_path):
    proc = start(tmp_path, SLOW_SAVE)
    wait_for_rows(tmp_path / "l" / "metrics.csv", 3, proc)
    proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + 120
    while not (tmp_path / "saving").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert time.monotonic() - t0 < 30  # not the 60 s the save would have taken
    assert proc.returncode == 130, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("gputrain train: stopped at once (a second SIGINT")
    assert not list(tmp_path.rglob(LOCK_NAME))  # the lock went with it; the half save is only a .tmp
    assert C.list_checkpoints(tmp_path / "c") == []


@pytest.mark.multiprocess
def test_every_rank_stops_after_the_same_step(tmp_path):
    """SIGTERM to rank 1 alone: rank 0 learns it in the step's all-reduce, and both save that step."""
    psutil = pytest.importorskip("psutil")
    fields = dict(SIGNAL_FIELDS, batch_size=4, dropout=0.0, max_steps=2000)
    flags = cli_flags(**fields, checkpoint_dir=tmp_path / "c", log_dir=tmp_path / "l")
    launch = [*accelerate_launch(2), "-m", "gputrain", "train", *flags, "--no-progress"]
    proc = subprocess.Popen(launch, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_rows(tmp_path / "l" / "metrics.csv", 5, proc)
        workers = [p for p in psutil.Process(proc.pid).children(recursive=True) if "gputrain" in " ".join(p.cmdline())]
        rank1 = next(p for p in workers if p.environ().get("RANK") == "1")
        rank1.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    stopped = re.findall(r"gputrain train: SIGTERM: stopped after step (\d+); saved checkpoint", err)
    assert len(stopped) == 1, err[-3000:]  # printed by the main process only
    step = int(stopped[0])
    assert C.read_checkpoint(tmp_path / "c").step == step < fields["max_steps"]
    assert len(rows(tmp_path / "l" / "metrics.csv")) == step + 1
    assert not list(tmp_path.rglob(LOCK_NAME))

"""Checkpoints (chapter 6): atomic, verified, never unpickled, and a resume that is bitwise exact."""

import json
import pickle
import signal
import subprocess
import sys

import pytest
import torch
from helpers import snapshot

from gputrain import train as T
from gputrain.model import GPT
from gputrain.train import checkpoint as C

BASE = dict(
    n_layer=1,
    n_head=2,
    n_embd=32,
    block_size=32,
    batch_size=8,
    corpus_bytes=30_000,
    warmup_steps=3,
    eval_interval=5,
    eval_batches=2,
    progress=False,
    dropout=0.1,
    grad_accum_steps=2,
    spike_window=8,
)
STEPS = 12


def cfg(**overrides) -> T.TrainConfig:
    return T.TrainConfig(**{**BASE, "max_steps": STEPS, **overrides})


class Interrupt(Exception):
    pass


def interrupt_at(step):
    def hook(s, batch):
        if s == step:
            raise Interrupt  # what Ctrl-C (KeyboardInterrupt) does to a run, minus the signal
        return batch

    return hook


@pytest.fixture(scope="module")
def straight():
    return T.train(cfg())


def test_resume_is_bitwise_exact(tmp_path, straight):
    """N steps straight == N/2 steps, interrupt, resume, N/2 more: losses and weights bit for bit.

    With dropout on, two micro-batches per step, the spike detector's window and a
    resume point in the middle of an epoch: everything that carries state.
    """
    half = STEPS // 2
    with pytest.raises(Interrupt):
        T.train(cfg(checkpoint_dir=str(tmp_path), checkpoint_interval=half), batch_hook=interrupt_at(half + 1))
    assert [p.name for p in C.list_checkpoints(tmp_path)] == [f"step_{half:08d}"]
    resumed = T.train(cfg(checkpoint_dir=str(tmp_path), checkpoint_interval=half, resume_from=str(tmp_path)))
    assert resumed.losses == straight.losses  # exact float equality, every step
    assert resumed.val_losses == straight.val_losses and resumed.lrs == straight.lrs
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_round_trip_keeps_ties_optimizer_and_history(tmp_path):
    result = T.train(cfg(max_steps=4, checkpoint_dir=str(tmp_path)))
    ckpt = C.read_checkpoint(tmp_path)
    assert ckpt.step == 4 and ckpt.aliases == {"head.weight": "wte.weight"}  # the tied matrix is stored once
    model = GPT(cfg().model_config())
    C.load_weights(model, ckpt.weights, ckpt.aliases)
    assert model.head.weight is model.wte.weight  # still tied after loading
    for k, v in result.model.state_dict().items():
        assert torch.equal(model.state_dict()[k], v)
    assert ckpt.trainer["history.losses"].tolist() == result.losses
    assert {k.split(".")[-1] for k in ckpt.trainer if k.startswith("optim.")} == {"step", "exp_avg", "exp_avg_sq"}
    assert json.loads((ckpt.path / "manifest.json").read_text())["format"] == C.CHECKPOINT_FORMAT


def test_resume_never_unpickles(tmp_path, monkeypatch):
    T.train(cfg(max_steps=6, checkpoint_dir=str(tmp_path)))

    def refuse(*args, **kwargs):
        raise AssertionError("a checkpoint must not go through pickle")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    resumed = T.train(cfg(max_steps=8, schedule_steps=6, checkpoint_dir=str(tmp_path), resume_from=str(tmp_path)))
    assert resumed.steps == 8


def test_only_the_newest_checkpoints_are_kept(tmp_path):
    T.train(cfg(max_steps=10, checkpoint_dir=str(tmp_path), checkpoint_interval=2, keep_checkpoints=2))
    assert [p.name for p in C.list_checkpoints(tmp_path)] == ["step_00000008", "step_00000010"]


def test_early_stopping_state_survives_a_resume(tmp_path):
    """The best weights live in best.safetensors, so a resumed run still restores them."""
    over = dict(
        corpus_bytes=3_000,
        dropout=0.0,
        max_steps=60,
        lr=2e-2,
        eval_interval=4,
        patience=2,
        grad_accum_steps=1,
        warmup_steps=0,
        schedule="constant",
        weight_decay=0.0,
        spike_window=0,
    )
    whole = T.train(cfg(**over))
    assert whole.stopped_early, "the setting must overfit within max_steps"
    stop = whole.steps - 4  # interrupt shortly before it stops
    with pytest.raises(Interrupt):
        T.train(cfg(**over, checkpoint_dir=str(tmp_path), checkpoint_interval=4), batch_hook=interrupt_at(stop + 1))
    resumed = T.train(cfg(**over, checkpoint_dir=str(tmp_path), checkpoint_interval=4, resume_from=str(tmp_path)))
    assert (resumed.steps, resumed.best_step, resumed.stopped_early) == (whole.steps, whole.best_step, True)
    a, b = whole.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


# --- bad checkpoints: one clear error, nothing written --------------------------------


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete", "manifest"])
def test_corrupt_checkpoint_is_one_clear_error_and_nothing_is_overwritten(tmp_path, damage):
    T.train(cfg(max_steps=4, checkpoint_dir=str(tmp_path)))
    target = C.find_checkpoint(tmp_path) / ("manifest.json" if damage == "manifest" else "trainer.safetensors")
    data = bytearray(target.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x01  # one bit: safetensors alone would not notice, the sha256 does
        target.write_bytes(bytes(data))
    elif damage == "truncate":
        target.write_bytes(bytes(data[: len(data) // 3]))
    elif damage == "delete":
        target.unlink()
    else:
        target.write_text("{not json")
    before = snapshot(tmp_path)
    with pytest.raises(C.CheckpointError, match="is corrupt or incomplete .*no earlier checkpoint is left") as err:
        T.train(cfg(max_steps=8, schedule_steps=4, checkpoint_dir=str(tmp_path), resume_from=str(tmp_path)))
    assert "\n" not in str(err.value)
    assert snapshot(tmp_path) == before


def test_checkpoint_from_another_shape_is_one_clear_error(tmp_path):
    T.train(cfg(max_steps=4, checkpoint_dir=str(tmp_path / "a")))
    before = snapshot(tmp_path)
    with pytest.raises(C.CheckpointError, match=r"different model: n_embd=32 \(this run: 64\)"):
        T.train(cfg(max_steps=8, n_embd=64, checkpoint_dir=str(tmp_path / "a"), resume_from=str(tmp_path / "a")))
    assert snapshot(tmp_path) == before


def test_a_fresh_run_never_overwrites_another_runs_checkpoints(tmp_path):
    T.train(cfg(max_steps=4, checkpoint_dir=str(tmp_path), log_dir=str(tmp_path / "log")))
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match="already holds another run's files; pass --resume-from"):
        T.train(cfg(max_steps=4, checkpoint_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="log_dir=.* already holds another run's metrics.csv; choose an empty"):
        T.train(cfg(max_steps=4, log_dir=str(tmp_path / "log")))
    assert snapshot(tmp_path) == before


def test_resuming_an_older_checkpoint_past_a_newer_one_is_refused(tmp_path):
    T.train(cfg(max_steps=6, checkpoint_dir=str(tmp_path), checkpoint_interval=3))
    before = snapshot(tmp_path)
    with pytest.raises(C.CheckpointError, match="step_00000006' is newer than the checkpoint to resume from"):
        T.train(cfg(max_steps=8, checkpoint_dir=str(tmp_path), resume_from=str(tmp_path / "step_00000003")))
    assert snapshot(tmp_path) == before


# --- SIGKILL while a checkpoint is being written ---------------------------------------

KILLER = r"""
import json, os, signal, sys
import gputrain.train.checkpoint as C
import gputrain.train as T

where = sys.argv[2]
writes = {"model": 4, "manifest": 6}  # 3 files per checkpoint: the 2nd checkpoint's 1st and 3rd
count = 0
write_file, rename = C._write_file, os.rename

def dying_write(path, data):
    global count
    count += 1
    if writes.get(where) == count:  # die halfway through writing this file
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])
            f.flush()
            os.fsync(f.fileno())
        os.kill(os.getpid(), signal.SIGKILL)
    write_file(path, data)

def dying_rename(src, dst):
    if where == "rename" and str(dst).endswith("step_00000010"):  # every file complete, not yet renamed
        os.kill(os.getpid(), signal.SIGKILL)
    rename(src, dst)

C._write_file = dying_write
C.os.rename = dying_rename
T.train(T.TrainConfig(**json.loads(sys.argv[1])))
"""


@pytest.mark.multiprocess
@pytest.mark.parametrize("where", ["model", "manifest", "rename"])
def test_sigkill_during_save_leaves_the_previous_checkpoint_loadable(tmp_path, where):
    over = dict(BASE, max_steps=15, checkpoint_dir=str(tmp_path), checkpoint_interval=5)
    proc = subprocess.run(
        [sys.executable, "-c", KILLER, json.dumps(over), where], capture_output=True, text=True, timeout=300
    )  # same thread count as this process: bitwise comparable
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert [p.name for p in C.list_checkpoints(tmp_path)] == ["step_00000005"]
    assert list(tmp_path.glob(".step_00000010.tmp"))  # the half-written one, under its temporary name
    assert C.read_checkpoint(tmp_path).step == 5  # verified by sha256: intact
    resumed = T.train(T.TrainConfig(**over, resume_from=str(tmp_path)))
    straight = T.train(T.TrainConfig(**{**over, "checkpoint_dir": "", "checkpoint_interval": 0}))
    assert resumed.losses == straight.losses
    assert not list(tmp_path.glob(".step_*.tmp"))  # the next save cleaned up


def test_a_checkpoint_older_than_a_model_field_resumes_with_that_fields_default():
    """Checkpoints written before tie_embeddings and attention existed held their defaults then."""
    import dataclasses
    from types import SimpleNamespace

    from gputrain.model import GPTConfig

    shape = dict(vocab_size=256, block_size=16, n_layer=1, n_head=2, n_embd=16)
    model = GPT(GPTConfig(**shape))
    weights = {k: v for k, v in model.state_dict().items() if k != "head.weight"}  # tied: stored once
    old = {k: v for k, v in dataclasses.asdict(GPTConfig(**shape)).items() if k not in ("tie_embeddings", "attention")}
    ckpt = SimpleNamespace(path="old", model_config=old, weights=weights, aliases={"head.weight": "wte.weight"})
    now = dataclasses.asdict(GPTConfig(**shape, attention="flash-triton"))  # same weights, another kernel
    C.check_compatible(ckpt, model, now)
    with pytest.raises(C.CheckpointError, match="tie_embeddings=True"):
        C.check_compatible(ckpt, model, dataclasses.asdict(GPTConfig(**shape, tie_embeddings=False)))

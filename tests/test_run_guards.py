"""Issue 23, items 3-5 and defects c-e: paths checked before training, one run per directory, honest messages.

Each test reproduces what a new user hit and failed before the fix: a read-only
checkpoint directory found after all the training, two runs on one directory,
hints that named something that then failed, binary data trained on, a CLI that
took seconds to answer a typo, an import cycle, a README command that could not
run, and two validation losses that disagreed.
"""

import errno
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import pytest
import torch
from helpers import ROOT, SMALL_GPT, TINY_LADDER, cli_flags, import_graph, run_cli, snapshot

from gputrain.cli import main
from gputrain.cli_spec import config_fields, static_fields, static_names
from gputrain.train import checkpoint as C
from gputrain.train import rundir

FLAGS = cli_flags(**SMALL_GPT, corpus_bytes=20_000, warmup_steps=0, eval_interval=0)


def call(*argv) -> int:
    try:
        return main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's own usage errors
        return exc.code


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


@pytest.fixture(scope="module")
def six_steps(tmp_path_factory):
    """A finished run: checkpoints at steps 3 and 6, and its log."""
    root = tmp_path_factory.mktemp("six")
    assert call("train", *FLAGS, "--max-steps", 6, "--checkpoint-interval", 3, "--keep-checkpoints", 5,
                "--checkpoint-dir", root / "c", "--log-dir", root / "l", "--quiet") == 0  # fmt: skip
    return root


@pytest.fixture
def run(six_steps, tmp_path):
    for name in ("c", "l"):
        shutil.copytree(six_steps / name, tmp_path / name)
    return tmp_path


# --- 3. every output path is checked before the first step ------------------------------------

UNWRITABLE = Path("/sys/gputrain-test/out")  # read-only even for root


def unwritable() -> bool:
    try:
        UNWRITABLE.mkdir(parents=True)
    except OSError:
        return True
    shutil.rmtree(UNWRITABLE.parent)
    return False


@pytest.mark.skipif(not unwritable(), reason="needs a directory nobody can write (/sys on Linux)")
@pytest.mark.parametrize("flag", ["--checkpoint-dir", "--log-dir"])
def test_an_unwritable_directory_fails_before_the_first_step(tmp_path, capsys, flag):
    """It used to train every step, then die at the first save with a traceback."""
    other = "--log-dir" if flag == "--checkpoint-dir" else "--checkpoint-dir"
    code = call("train", *FLAGS, "--max-steps", 3, flag, UNWRITABLE, other, tmp_path / "new" / "deep")
    err = one_line(capsys.readouterr().err)
    assert code == 2 and f"={str(UNWRITABLE)!r} cannot be written" in err
    assert list(tmp_path.iterdir()) == []  # the other directory, probed first, was removed again


def test_a_full_disk_during_a_save_keeps_the_previous_checkpoint(run, tmp_path, capsys, monkeypatch):
    write = C._write_file

    def full(path, data):
        if "step_00000006" in str(path) and path.name == "trainer.safetensors":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write(path, data)

    monkeypatch.setattr(C, "_write_file", full)
    d = tmp_path / "fresh"
    code = call("train", *FLAGS, "--max-steps", 6, "--checkpoint-interval", 3, "--checkpoint-dir", d / "c",
                "--log-dir", d / "l", "--quiet")  # fmt: skip
    err = one_line(capsys.readouterr().err)
    assert code == 1
    assert "could not write checkpoint step_00000006" in err and "(No space left on device)" in err
    assert f"the previous checkpoint {str(d / 'c' / 'step_00000003')!r} is intact" in err
    assert [p.name for p in (d / "c").iterdir()] == ["step_00000003"]  # no .tmp, no lock
    assert C.read_checkpoint(d / "c").step == 3
    assert not (d / "l" / rundir.LOCK_NAME).exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--loop-overhead", "--loop-steps", "0"], "--loop-steps must be >= 1, got 0"),
        (["--loop-rounds", "-1"], "--loop-rounds must be >= 1"),
        (["--out", "."], "is a directory; name a JSON file"),
        pytest.param(
            ["--out", UNWRITABLE / "ladder.json"],
            "cannot be written",
            marks=pytest.mark.skipif(not unwritable(), reason="needs a directory nobody can write"),
        ),  # fmt: skip
    ],
)
def test_every_bench_flag_is_checked_before_the_ladder(tmp_path, capsys, monkeypatch, flags, message):
    """--loop-steps 0 used to fail after the whole ladder had run; an unwritable --out, after it too."""
    import gputrain.bench

    monkeypatch.setattr(gputrain.bench, "run_ladder", lambda *a, **k: pytest.fail("the ladder ran"))
    monkeypatch.chdir(tmp_path)
    code = call("bench", *cli_flags(**TINY_LADDER), *flags)
    assert code == 2 and message in one_line(capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == []


# --- 4. one run per directory ------------------------------------------------------------------


def lock(directory: Path, pid: int) -> Path:
    start = rundir._start_time(pid)
    path = directory / rundir.LOCK_NAME
    path.write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "start": start, "since": "then"}))
    return path


def test_a_directory_locked_by_a_running_process_is_refused(run, capsys):
    held = lock(run / "l", os.getppid())  # a process that is certainly alive
    before = snapshot(run)
    code = call("train", "--resume-from", run / "c", "--max-steps", 8, "--log-dir", run / "l")
    err = one_line(capsys.readouterr().err)
    assert code == 2 and f"log_dir={str(run / 'l')!r} is in use by another run (process {os.getppid()}" in err
    assert snapshot(run) == before and held.exists()


def test_a_stale_lock_is_taken_over_with_a_warning(run, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock(run / "c", dead.pid)
    assert call("train", "--resume-from", run / "c", "--max-steps", 8, "--log-dir", run / "l", "--quiet") == 0
    err = capsys.readouterr().err
    assert f"warning: checkpoint_dir: taking over {str(run / 'c' / rundir.LOCK_NAME)!r} from process {dead.pid}" in err
    assert C.read_checkpoint(run / "c").step == 8 and not list(run.rglob(rundir.LOCK_NAME))


@pytest.mark.multiprocess
def test_a_second_run_on_the_same_directories_refuses_while_the_first_runs(tmp_path, capsys):
    """Both used to start: one died at its first save, the other's metrics.csv ended malformed."""
    dirs = ["--checkpoint-dir", str(tmp_path / "c"), "--log-dir", str(tmp_path / "l")]
    first = subprocess.Popen([sys.executable, "-m", "gputrain", "train", *FLAGS, "--max-steps", "100000", *dirs],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        log = tmp_path / "l" / "metrics.csv"
        while first.poll() is None and not (log.exists() and len(log.read_text().splitlines()) > 3):
            time.sleep(0.02)
        assert call("train", *FLAGS, "--max-steps", 5, *dirs) == 2
        err = one_line(capsys.readouterr().err)
        assert re.search(r"checkpoint_dir='.*' is in use by another run \(process \d+ on .* since .*\)", err), err
        first.send_signal(signal.SIGTERM)
        _, first_err = first.communicate(timeout=300)
    finally:
        first.kill()
    assert first.returncode == 143, first_err[-2000:]
    steps = [line.split(",")[0] for line in log.read_text().splitlines()[1:]]
    assert steps == [str(s) for s in range(1, len(steps) + 1)]  # every row the first run's, once each


# --- 5. messages that say what works ---------------------------------------------------------


def test_the_log_dir_hint_names_what_works(run, capsys):
    """It used to say --resume-from LOG_DIR, which then failed: a log directory holds no checkpoint."""
    assert call("train", *FLAGS, "--max-steps", 8, "--log-dir", run / "l") == 2
    err = one_line(capsys.readouterr().err)
    assert "already holds another run's metrics.csv" in err and f"--resume-from {run / 'l'}" not in err
    assert "passing its checkpoint_dir to --resume-from" in err
    assert call("train", "--resume-from", run / "c", "--max-steps", 8, "--log-dir", run / "l", "--quiet") == 0


def test_the_corrupt_checkpoint_hint_is_followed_successfully(run, capsys):
    """It used to say 'resume from an earlier checkpoint', and doing so was refused (a newer one existed)."""
    model = run / "c" / "step_00000006" / "model.safetensors"
    model.write_bytes(model.read_bytes()[:100])
    # the run is a copy: --log-dir keeps it from writing into the log of the run it was copied from
    assert call("train", "--resume-from", run / "c", "--max-steps", 8, "--log-dir", run / "l") == 2
    err = one_line(capsys.readouterr().err)
    hint = re.search(r"resume from the one before it with (--resume-from \S+)", err)
    assert hint and hint.group(1) == f"--resume-from {run / 'c' / 'step_00000003'}", err
    assert call("train", *shlex.split(hint.group(1)), "--max-steps", 8, "--log-dir", run / "l", "--quiet") == 0
    assert [C.read_checkpoint(p).step for p in C.list_checkpoints(run / "c")] == [3, 6, 8]  # 6 written anew


@pytest.mark.parametrize("split, fraction, fix", [("training", "0.995", "0.1"), ("validation", "0.0001", "0.1")])
def test_a_split_too_short_names_the_right_val_fraction(tmp_path, capsys, split, fraction, fix):
    """A short training split used to be told to use 'a larger val_fraction', which shortens it further."""
    (tmp_path / "t.txt").write_text("print('hello')\n" * 300)
    data = ["--data", tmp_path / "t.txt", "--max-steps", 2]
    assert call("train", *FLAGS, *data, "--val-fraction", fraction) == 2
    err = one_line(capsys.readouterr().err)
    want = "smaller" if split == "training" else "larger"
    assert f"the {split} split has" in err and f"a {want} val_fraction (now {fraction})" in err
    assert call("train", *FLAGS, *data, "--val-fraction", fix, "--quiet") == 0


def test_a_directory_as_data_gets_a_hint_that_works(tmp_path, capsys):
    """A directory used to be 'not found', whether it held text or not."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    for i in range(3):
        (tmp_path / "src" / "pkg" / f"m{i}.py").write_text("def f(x):\n    return x + 1\n" * 300)
    (tmp_path / "src" / "README").write_text("notes")
    assert call("train", *FLAGS, "--max-steps", 2, "--data", tmp_path / "empty") == 2
    assert "is a directory with no files in it" in one_line(capsys.readouterr().err)
    assert call("train", *FLAGS, "--max-steps", 2, "--data", tmp_path / "src") == 2
    err = one_line(capsys.readouterr().err)
    hint = re.search(r"--data '(.*)' \(3 files\)", err)
    assert hint and hint.group(1) == str(tmp_path / "src" / "**" / "*.py"), err
    assert call("train", *FLAGS, "--max-steps", 2, "--data", hint.group(1), "--quiet") == 0


def test_binary_data_is_refused_and_a_little_invalid_utf8_is_warned_about(tmp_path, capsys):
    """Binary --data used to train without a word."""
    (tmp_path / "blob.bin").write_bytes(bytes(range(128, 256)) * 300)
    before = snapshot(tmp_path)
    assert call("train", *FLAGS, "--max-steps", 2, "--data", tmp_path / "blob.bin", "--log-dir", tmp_path / "l") == 2
    err = one_line(capsys.readouterr().err)
    assert "does not look like text: 100% of its bytes are not valid UTF-8" in err
    assert snapshot(tmp_path) == before
    text = b"def f(x):\n    return x + 1\n" * 400
    (tmp_path / "mostly.txt").write_bytes(text[:5000] + b"\xff" * 30 + text[5000:])  # 0.3% invalid
    assert call("train", *FLAGS, "--max-steps", 2, "--data", tmp_path / "mostly.txt", "--quiet") == 0
    assert f"warning: {30 / (len(text) + 30):.2%} of the bytes of data=" in capsys.readouterr().err
    # several files: the refusal names the one that is least text (with no --corpus-bytes, it used to read
    # 0 bytes of each and name the first)
    files = f"{tmp_path / 'mostly.txt'},{tmp_path / 'blob.bin'}"
    assert call("train", *FLAGS, "--corpus-bytes", 0, "--max-steps", 2, "--data", files) == 2
    assert f"(most of all in {str(tmp_path / 'blob.bin')!r})" in one_line(capsys.readouterr().err)


def test_the_utf8_count_agrees_across_block_boundaries_and_reads_the_cache_file_not_the_map(tmp_path):
    """Each U+FFFD is counted once wherever the blocks cut it; the cached corpus is read from its file, so its
    pages enter the run's memory only when a batch touches them."""
    from gputrain.data import TokenFile
    from gputrain.train.inputs import REPLACEMENT, invalid_utf8_share, token_bytes

    data = (b"ab" + REPLACEMENT) * 50 + b"xyz"  # 50 replacements in 253 bytes
    for chunk in (1, 2, 3, 4, 7, 1000):
        blocks = [data[i : i + chunk] for i in range(0, len(data), chunk)]
        assert invalid_utf8_share(blocks) == 50 / (len(data) - 100), chunk
    path = tmp_path / "c.tokens"
    path.write_bytes(data + b"footer that is not tokens")
    tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    cached = TokenFile(tokens, len(data), False, path, "reused")
    assert b"".join(token_bytes(cached, chunk=5)) == data  # from the file, stopping where the tokens end
    assert b"".join(token_bytes(TokenFile(tokens.long(), len(data), False, None, "in memory"), chunk=5)) == data


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--params", "inf"], "--params must be between 1 and 1e+15, got inf"),
        (["--params", "nan"], "--params must be between 1 and 1e+15, got nan"),
        (["--params", "-1"], "--params must be between 1 and 1e+15"),
        # issue 30: 1e308 printed 'inf GB', 1e300 a 300-digit number, and half a parameter was accepted
        (["--params", "1e308"], "--params must be between 1 and 1e+15, got 1e+308"),
        (["--params", "1e300"], "--params must be between 1 and 1e+15, got 1e+300"),
        (["--params", "0.5"], "--params must be between 1 and 1e+15, got 0.5"),
        (["--batch-size", str(10**30)], "--batch-size must be between 1 and 1e+07"),
        (["--seq-len", str(10**30)], "--seq-len must be between 1 and 1e+08"),
        (["--model", "gpt2-small", "--seq-len", "4096"], "--seq-len 4096 exceeds the context of gpt2-small (1024"),
        (["--model", "gpt2-small", "--batch-size", "0"], "--batch-size must be between 1 and 1e+07, got 0"),
    ],
)
def test_memory_refuses_sizes_it_cannot_mean(capsys, flags, message):
    """inf parameters and a 4096-token window on a 1024-token model used to print a table."""
    assert call("memory", *flags) == 2
    assert message in one_line(capsys.readouterr().err)


def test_version():
    out = run_cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"gputrain {version('gputrain')}"


NO_TORCH = r"""
import sys
from gputrain.cli import main
answers = []
for argv in (["train", "--max-stpes", "3"], ["train", "--optimizer", "adamx"], ["memory", "--precision", "fp9"],
             ["bench", "--compile-scope", "all"], ["trian"], ["--version"], ["train", "--help"]):
    try:
        main(argv)
    except SystemExit as exc:
        answers.append(exc.code)
print(answers, "torch" in sys.modules)
"""


def test_a_typo_is_answered_before_torch_is_imported():
    """Every answer used to wait seconds for torch (and the rest of the package) to import."""
    out = subprocess.run([sys.executable, "-c", NO_TORCH], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "[2, 2, 2, 2, 2, 0, 0] False", out.stdout + out.stderr
    assert "unrecognized arguments: --max-stpes" in out.stderr and "invalid choice: 'adamx'" in out.stderr


def test_import_gputrain_is_light_and_its_names_still_work():
    """`import gputrain` used to import torch (through device.py); the chapters' `gt.device...` must still work."""
    code = "import sys, gputrain as gt; light = 'torch' not in sys.modules; "
    code += "print(light, gt.preset() in ('cpu', 'gpu'), callable(gt.device.median_seconds), gt.__version__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["True", "True", "True", version("gputrain")], out.stderr[-2000:]


TRAIN_IMPORTS = r"""
import sys
from gputrain.cli import main
main(["train", "--max-steps", "2", "--warmup-steps", "1", "--n-layer", "1", "--n-embd", "32", "--block-size", "32",
      "--batch-size", "4", "--corpus-bytes", "60000", "--eval-interval", "2", "--eval-batches", "1", "--quiet",
      "--log-dir", sys.argv[1], "--checkpoint-dir", sys.argv[2], "--cache-dir", "none"])
print(sorted({m.split(".")[0] for m in sys.modules} | {m for m in sys.modules if m.startswith("torch.")}))
"""


def test_training_imports_no_plotting_or_dataframe_library(tmp_path):
    """A run loads what it uses: matplotlib (a third of a second, ~45 MiB) came in through the run log's
    plotting helper, which only notebooks call; pandas and datasets have no place in a run on local text.
    Nor has the compiler in a run that compiles nothing: torch's optimizers and Accelerate's unwrap_model
    imported torch._dynamo (1.2-2.5 s, 75-150 MiB), and Accelerate's DTensor checks torch.distributed.tensor
    and sympy (0.3-0.8 s, 40 MiB), here through a checkpoint and a validation pass."""
    out = subprocess.run(
        [sys.executable, "-c", TRAIN_IMPORTS, str(tmp_path / "log"), str(tmp_path / "ckpt")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = set(eval(out.stdout.strip().splitlines()[-1]))
    assert {"torch", "accelerate", "gputrain"} <= loaded  # it did train
    assert (tmp_path / "log" / "metrics.csv").exists() and any((tmp_path / "ckpt").iterdir())
    heavy = loaded & {"matplotlib", "pandas", "datasets", "IPython", "ipywidgets", "sympy", "triton"}
    heavy |= loaded & {"torch._dynamo", "torch._inductor", "torch.distributed.tensor"}
    assert not heavy, f"a training run imported {sorted(heavy)}"


def test_the_cli_reads_the_same_flags_as_the_imported_code():
    """cli_spec reads the source without importing it; the imported dataclasses and tables must agree."""
    import dataclasses
    import importlib

    from gputrain import cli

    for module, cls in (cli.TRAIN_CONFIG, cli.LADDER_CONFIG):  # static_*: no fallback to importing
        real = dataclasses.fields(getattr(importlib.import_module(module), cls))
        read = static_fields(module, cls)
        assert [(f.name, f.kind, f.default) for f in read] == [(f.name, type(f.default), f.default) for f in real]
    tables = [*cli.CHOICES.values(), ("gputrain.train.config", "PRESETS")]
    tables += [("gputrain.memory.recipes", "RECIPES"), ("gputrain.memory.recipes", "OPTIMIZER_STATES")]
    tables += [("gputrain.memory.activations", "ACTIVATION_MODELS")]
    for module, name in tables:
        assert static_names(module, name) == list(getattr(importlib.import_module(module), name)), name


def test_train_help_groups_its_flags():
    """It used to list 60 flags in one block."""
    blocks: dict[str, str] = {}
    heading = None
    for line in run_cli("train", "--help").stdout.splitlines():
        if re.fullmatch(r"\S.*:", line):
            heading = line[:-1]
            blocks[heading] = ""
        elif heading:
            blocks[heading] += line + "\n"
    fields = config_fields("gputrain.train.config", "TrainConfig")
    sections = list(dict.fromkeys(f.section.partition(": ")[0] for f in fields))
    assert list(blocks) == ["options", *sections]
    assert sections[:3] == ["model shape", "experts (chapter 9)", "data"] and "optimisation" in sections
    assert any(s.startswith("precision") for s in sections) and sections[-1] == "output"
    for f in fields:
        assert re.search(rf"^  --{f.name.replace('_', '-')}\b", blocks[f.section.partition(": ")[0]], re.M), f.name


# --- defects c, d, e ---------------------------------------------------------------------------


def test_no_module_of_gputrain_imports_one_that_imports_it_back():
    """c: train/config.py and train/components.py imported each other (the latter under TYPE_CHECKING)."""
    graph = import_graph(Path(C.__file__).resolve().parents[1])

    def reaches(start: str, goal: str, seen: set) -> bool:
        return any(n == goal or (n not in seen and not seen.add(n) and reaches(n, goal, seen)) for n in graph[start])

    cycles = sorted(a for a in graph for b in graph[a] if reaches(b, a, set()))
    assert cycles == []
    assert "gputrain.train.config" not in graph["gputrain.train.components"]


def test_the_readme_notebook_command_runs():
    """d: README says `.venv/bin/jupyter lab chapters/`, but JupyterLab was in no extra that make setup installs."""
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"`(\.venv/bin/jupyter lab chapters/)`", readme)
    assert commands, "the README no longer names the notebook command this test runs"
    book = re.search(r"^book = \[(.*?)^\]", (ROOT / "companion" / "pyproject.toml").read_text(), re.M | re.S)
    assert re.search(r'^\s*"jupyterlab\b', book.group(1), re.M), "make setup installs the book extra"
    out = subprocess.run([*shlex.split(commands[0]), "--version"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and re.fullmatch(r"\d+\.\d+\.\d+\S*", out.stdout.strip()), out.stdout + out.stderr


def test_eval_reports_the_loss_the_run_validated(tmp_path, capsys):
    """e: training validated on 8 batches of 32 windows, `gputrain eval` read 50 of 16: two numbers, one name."""
    flags = cli_flags(**{**SMALL_GPT, "corpus_bytes": 40_000, "warmup_steps": 0, "eval_interval": 4,
                         "eval_batches": 3, "seq_len": 24})  # fmt: skip
    assert call("train", *flags, "--max-steps", 4, "--checkpoint-dir", tmp_path / "c", "--log-dir", tmp_path / "l",
                "--quiet") == 0  # fmt: skip
    logged = float(open(tmp_path / "l" / "metrics.csv").read().splitlines()[-1].split(",")[3])
    assert call("eval", "--checkpoint", tmp_path / "c", "--json") == 0
    r = json.loads(capsys.readouterr().out)
    assert r["loss"] == pytest.approx(logged, rel=1e-5)
    assert r["batches"] == "3 batches of 8 windows of 24 tokens, as the run's validation pass"
    assert r["tokens"] == 3 * 8 * 24

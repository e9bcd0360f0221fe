"""Issue 30, part 4 items 6-10 and the "Also" items, and part 5's `gputrain plot`: a new user's trials."""

import csv
import errno
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import SMALL_GPT, cli_flags, run_cli

from gputrain import cli_spec
from gputrain.cli import build_parser, main
from gputrain.train import TrainConfig, build_data, plot_history, preset_config, read_history, train
from gputrain.train import checkpoint as C

TINY = dict(**SMALL_GPT, corpus_bytes=20_000, warmup_steps=0, eval_interval=0, cache_dir="none")


def one_line_error(err: str) -> bool:
    return err.strip().count("\n") == 0 and "error:" in err and "Traceback" not in err


# --- item 6: the data line says what reading the file changed -------------------------------


def test_the_data_line_gives_the_size_on_disk_and_what_was_converted(tmp_path):
    """It said 'all 193,187 bytes of crlf.txt' for a 200,000-byte file: bytes after decoding, unexplained."""
    data = bytearray(b"hello world, some text here\r\n" * 7000)[:200_000]
    for i in range(40):
        data[1000 + 4000 * i] = 0xFF  # 40 bytes that are not UTF-8
    data[-1:] = b"\r"  # and one old-Mac line ending at the end
    (tmp_path / "crlf.txt").write_bytes(bytes(data))
    lines = []
    build_data(TrainConfig(**{**TINY, "corpus_bytes": 0}, data=str(tmp_path / "crlf.txt")), say=lines.append)
    crlf, lone = bytes(data).count(b"\r\n"), bytes(data).count(b"\r") - bytes(data).count(b"\r\n")
    text = 200_000 - crlf + 2 * 40  # a CRLF becomes one byte, an invalid byte the three of U+FFFD
    assert lines[0].startswith(f"data: all 200,000 bytes of crlf.txt as {text:,} bytes of text (")
    assert f"{crlf:,} CRLF line endings read as LF, {lone} CR line endings read as LF, 40 invalid UTF-8" in lines[0]
    assert f"-> {text:,} tokens" in lines[0]
    plain = tmp_path / "plain.txt"
    plain.write_bytes(b"plain text\n" * 2000)  # nothing converted: the line stays as it was
    lines.clear()
    build_data(TrainConfig(**{**TINY, "corpus_bytes": 0}, data=str(plain)), say=lines.append)
    assert lines[0].startswith("data: all 22,000 bytes of plain.txt -> 22,000 tokens")


# --- item 7: a full disk under --log-dir -------------------------------------------------------


def _limit_file_size(limit: int):
    """``preexec_fn``: no file may grow past ``limit`` bytes (a full disk, for one process; Python ignores SIGXFSZ)."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.parametrize("limit", [2_000, 30], ids=["mid-run", "at-the-lock"])
def test_a_full_disk_under_the_log_dir_is_one_line_and_leaves_whole_rows(tmp_path, limit):
    """It gave chained tracebacks, a row cut off mid-number and a leftover .metrics.csv.tmp."""
    log = tmp_path / "log"
    argv = ["train", *cli_flags(**TINY), "--max-steps", "40", "--log-dir", str(log), "--no-progress"]
    out = subprocess.run(
        [sys.executable, "-m", "gputrain", *argv],
        capture_output=True,
        text=True,
        preexec_fn=_limit_file_size(limit),
        timeout=300,
    )
    assert out.stderr.strip().count("\n") == 0 and "Traceback" not in out.stderr
    assert "File too large" in out.stderr and "free space" in out.stderr
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == (["metrics.csv"] if limit > 30 else [])
    if limit == 30:  # the lock is the first file a run writes in its log_dir
        assert out.returncode == 2 and out.stderr.startswith("gputrain train: error: log_dir=")
        return
    assert out.returncode == 1 and out.stderr.startswith("gputrain train: stopped: could not append to ")
    text = (log / "metrics.csv").read_bytes()
    assert text.endswith(b"\r\n")
    rows = list(csv.reader(text.decode().splitlines()))
    assert len(rows) > 2 and all(len(r) == 8 for r in rows)
    assert [int(r[0]) for r in rows[1:]] == list(range(1, len(rows)))


def test_a_full_disk_when_the_log_starts_leaves_no_temporary_file(tmp_path, monkeypatch, capsys):
    """The header (and a resumed run's kept rows) go through a temporary file, which a full disk left behind."""

    def full_disk(path, data):
        Path(path).write_bytes(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(C, "_write_file", full_disk)
    log = tmp_path / "log"
    assert main(["train", *cli_flags(**TINY), "--max-steps", "2", "--log-dir", str(log), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gputrain train: stopped: could not write ") and "No space left on device" in err
    assert err.strip().count("\n") == 0 and not [p for p in tmp_path.rglob("*") if p.is_file()]


# --- item 8: gputrain memory's bounds ------------------------------------------------------------


# (its refusals are cases of tests/test_run_guards.py::test_memory_refuses_sizes_it_cannot_mean)


def test_memory_still_answers_for_the_largest_sane_model(capsys):
    assert main(["memory", "--params", "1e15"]) == 0
    assert "inf" not in capsys.readouterr().out


# --- item 9: a reader that stops early ---------------------------------------------------------


@pytest.mark.parametrize("argv", [["memory", "--params", "7e9"], ["info"]])
def test_a_reader_that_leaves_early_is_no_error(argv):
    """`gputrain memory ... | head -1` ended in a BrokenPipeError traceback in 3 of 5 tries."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputrain", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    proc.stdout.close()  # the reader is gone before the first line: every write finds the pipe closed
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 0 and err == ""


# --- item 10: the corrupt newest checkpoint, from sample and eval -------------------------------


def test_sample_and_eval_name_the_earlier_checkpoint_with_their_own_flag(tmp_path, capsys):
    """They advised --resume-from, which is a flag of train."""
    ckpt = tmp_path / "c"
    train(TrainConfig(**TINY, max_steps=4, checkpoint_dir=str(ckpt), checkpoint_interval=2, progress=False))
    model = C.find_checkpoint(ckpt) / "model.safetensors"
    model.write_bytes(model.read_bytes()[:100])
    for argv in (["sample", "--checkpoint", str(ckpt), "--tokens", "3"], ["eval", "--checkpoint", str(ckpt)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert one_line_error(err) and "is corrupt or incomplete" in err
        assert err.strip().endswith(f"use the one before it: --checkpoint {ckpt / 'step_00000002'}")
        assert "--resume-from" not in err


# --- Also: help texts, --no-progress, Muon's momentum ------------------------------------------


def _help_of(parser, command: str, flag: str) -> str:
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    action = next(a for a in sub._actions if flag in a.option_strings)
    return sub._get_formatter()._expand_help(action)


def test_train_help_lists_every_choice_with_its_own_text():
    """The --optimizer help was typed by hand and left out muon."""
    from gputrain.train.components import MIXED_PRECISION, OPTIMIZERS, SCHEDULES

    parser = build_parser()
    for flag, table in (("--optimizer", OPTIMIZERS), ("--schedule", SCHEDULES), ("--mixed-precision", MIXED_PRECISION)):
        text = " ".join(_help_of(parser, "train", flag).split())
        for name, row in table.items():
            about = row if isinstance(row, str) else row.about
            assert f"{name}: {' '.join(about.split())}" in text, (flag, name)
    name = "gputrain.train.components"
    assert cli_spec.static_abouts(name, "OPTIMIZERS") == {k: v.about for k, v in OPTIMIZERS.items()}
    assert "not Muon's: 0.95" in _help_of(parser, "train", "--beta1")


def test_train_help_names_the_default_preset_whose_fields_it_shows():
    parser = build_parser()
    text = _help_of(parser, "train", "--preset")
    default = re.search(r"default: (\w+)", text).group(1)
    sub = next(a for a in parser._actions if a.dest == "command").choices["train"]
    assert default == sub.get_default("preset")
    preset = preset_config(default)
    for f in cli_spec.config_fields("gputrain.train.config", "TrainConfig"):
        assert f.default == getattr(preset, f.name), f.name  # the "(default: ...)" each flag shows


def test_no_progress_keeps_the_data_line_and_quiet_drops_it():
    """--no-progress dropped the data: line with the progress bar: a quiet run never said what it read."""
    out = run_cli("train", *cli_flags(**TINY), "--max-steps", "2", "--no-progress")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("data: the first 20,000 bytes of stdlib")
    assert lines[1].startswith("trained 2 steps")


def test_muon_says_that_beta1_is_not_its_momentum(capsys):
    argv = ["train", *cli_flags(**TINY), "--max-steps", "1", "--no-progress", "--optimizer", "muon"]
    assert main([*argv, "--beta1", "0.8"]) == 0
    assert "--beta1 0.8: Muon's momentum stays 0.95" in capsys.readouterr().out
    assert main(argv) == 0
    assert "Muon's momentum" not in capsys.readouterr().out


# --- part 5: gputrain plot -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory):
    """A run stopped by SIGTERM after step 4, then resumed to step 8, with its log."""
    root = tmp_path_factory.mktemp("plot")
    run = dict(TINY, eval_interval=3, progress=False, checkpoint_dir=str(root / "c"), log_dir=str(root / "l"))

    def stop_after_4(step, batch):
        if step == 4:
            signal.raise_signal(signal.SIGTERM)  # train() finishes the step, saves it and stops
        return batch

    first = train(TrainConfig(**run, max_steps=8), batch_hook=stop_after_4)
    assert (first.interrupted, first.steps) == ("SIGTERM", 4)
    assert train(TrainConfig(**run, max_steps=8, resume_from=str(root / "c"))).steps == 8
    return root


def test_metrics_csv_records_the_interrupt_and_the_resume(resumed_run):
    history = read_history(resumed_run / "l" / "metrics.csv")
    events = {int(s): e for s, e in zip(history["step"], history["event"]) if e}
    assert events == {4: "interrupted", 5: "resumed"} and history["step"] == list(range(1, 9))


def test_plot_history_marks_the_interrupt_and_the_resume_on_every_panel(resumed_run):
    import matplotlib

    matplotlib.use("Agg")
    fig = plot_history(resumed_run / "l" / "metrics.csv")
    for ax in fig.axes:
        marks = {line.get_gid(): list(line.get_xdata()) for line in ax.lines if line.get_gid()}
        assert marks == {"interrupted": [4.5, 4.5], "resumed": [4.5, 4.5]}  # between step 4 and step 5
    assert {"validation", "interrupted", "resumed"} <= {t.get_text() for t in fig.axes[0].get_legend().get_texts()}


def test_gputrain_plot_writes_a_png(resumed_run, tmp_path, capsys):
    from PIL import Image

    out = tmp_path / "curves.png"
    assert main(["plot", str(resumed_run / "l"), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    with Image.open(out) as image:
        image.verify()
        assert image.format == "PNG" and image.size[0] > image.size[1] > 100
    copy = tmp_path / "l"
    shutil.copytree(resumed_run / "l", copy)
    assert main(["plot", str(copy)]) == 0 and (copy / "metrics.png").is_file()  # the default: beside the log


@pytest.mark.parametrize(
    "args, message",
    [
        (["{tmp}/missing"], "not found; pass the --log-dir of a run"),
        (["{tmp}"], "no metrics.csv in"),
        (["{log}", "--out", "{tmp}/curves.txt"], "name an image file ending in one of"),
        (["{log}", "--out", "{tmp}/no/such/curves.png"], "does not exist"),
        (["{tmp}/other.csv"], "is not a gputrain metrics.csv"),
    ],
)
def test_gputrain_plot_bad_input_is_one_line(resumed_run, tmp_path, capsys, args, message):
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    argv = [a.format(tmp=tmp_path, log=resumed_run / "l") for a in args]
    assert main(["plot", *argv]) == 2
    err = capsys.readouterr().err
    assert one_line_error(err) and message in err


def test_the_summary_line_names_the_plot_command(tmp_path, capsys):
    log = tmp_path / "l"
    assert main(["train", *cli_flags(**TINY), "--max-steps", "1", "--no-progress", "--log-dir", str(log)]) == 0
    assert capsys.readouterr().out.strip().endswith(f"log {log / 'metrics.csv'} (draw it: gputrain plot {log})")


def test_training_imports_no_matplotlib(tmp_path):
    code = (
        "import sys; from gputrain.train import TrainConfig, train; "
        f"train(TrainConfig(**{TINY!r}, max_steps=2, progress=False, log_dir={str(tmp_path)!r})); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'PIL')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "MPLBACKEND": "Agg"})  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert Path(tmp_path / "metrics.csv").is_file()

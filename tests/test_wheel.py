"""The package as users get it: a wheel installed outside the repository runs every subcommand.

The wheel is built from a copy of companion/ (so the build writes nothing
into the checkout) and installed into a fresh virtual environment whose
only other path is the site-packages holding torch and friends; the working
directory is outside the checkout and no path of the checkout is on
``sys.path``.  Nothing here reaches the network.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from helpers import SMALL_GPT, TINY_LADDER, cli_flags

REPO = Path(__file__).resolve().parents[1]
TINY = cli_flags(**SMALL_GPT, corpus_bytes=20_000, warmup_steps=0, eval_interval=0)
BENCH = ["--preset", "cpu", *cli_flags(**TINY_LADDER, rungs="fp32", loop_overhead=True, loop_steps=2, loop_rounds=1)]


def _git_status() -> str:
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        return ""
    return subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=all"], capture_output=True, text=True
    ).stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("wheel")
    source = root / "companion"
    shutil.copytree(REPO / "companion", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(root / "dist"),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    wheel = next((root / "dist").glob("gputrain-*.whl"))
    env_dir = root / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)  # ensurepip: offline
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # installed by the new environment's own pip: this one would uninstall the editable gputrain first
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True,
        capture_output=True,
    )
    # torch, accelerate, ... come from this environment's site-packages: a path line, so its .pth
    # files (such as the editable install pointing at the checkout) are not processed
    (site / "_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = root / "work"
    work.mkdir()
    return python, work


def run(installed, *args, timeout=600):
    python, work = installed
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["GPUTRAIN_PRESET"] = "cpu"
    return subprocess.run([str(python), *args], cwd=work, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_installed_wheel_is_what_runs(installed):
    out = run(
        installed,
        "-c",
        "import gputrain, json, sys; print(json.dumps([gputrain.__file__, gputrain.__version__, sys.path]))",
    )
    assert out.returncode == 0, out.stderr
    where, version, path = json.loads(out.stdout)
    assert Path(where).is_relative_to(installed[0].parents[1]) and version == "0.1.0"
    own = [REPO, REPO / "companion", REPO / "companion" / "src", REPO / "tests"]
    assert not [p for p in path if p and any(Path(p).resolve() == o for o in own)]


def test_every_subcommand_runs_from_the_wheel_outside_the_repository(installed):
    before = _git_status()
    python, work = installed
    steps = [
        ("info", "--json"),
        ("train", *TINY, "--max-steps", "4", "--checkpoint-dir", "ckpt", "--log-dir", "log", "--no-progress"),
        ("sample", "--checkpoint", "ckpt", "--prompt", "def ", "--tokens", "20"),
        ("eval", "--checkpoint", "ckpt", "--max-batches", "2", "--batch-size", "4"),
        ("memory", "--precision", "fp8-deepseek-v3", "--model", "gpt2-small"),
        ("bench", *BENCH),
        ("scale", "--budget", "1e21", "--gpu", "H800"),
    ]
    for args in steps:
        out = run(installed, "-m", "gputrain", *args)
        assert out.returncode == 0, f"gputrain {args[0]}: {out.stderr[-2000:]}"
        assert "Traceback" not in out.stderr
    script = run(installed, "-c", "import shutil, sys; print(shutil.which('gputrain', path=sys.prefix + '/bin'))")
    assert script.stdout.strip().startswith(str(python.parents[1]))  # the console script is installed too
    assert (work / "ckpt" / "step_00000004" / "model.safetensors").exists() and (work / "log" / "metrics.csv").exists()
    stored = json.loads((work / "ladder_cpu.json").read_text())  # results go to the current directory
    assert stored["data"]["loop_overhead"]["steps"] == 2
    assert _git_status() == before  # nothing of the repository was read into or written

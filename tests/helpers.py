"""Helpers shared by several test files (tests/ is on sys.path via pytest.ini's pythonpath)."""

import ast
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
# a Chinese character (CJK Unified Ideographs and Extension A)
CJK = re.compile(r"[\u3400-\u9fff]")


def toc_docnames() -> list[str]:
    """The book's pages in table-of-contents order: the root, then every file of every part."""
    sys.path.insert(0, str(ROOT / "book" / "tools"))
    from toc import docnames

    return docnames()


def build_lock(folder: Path = ROOT / "_build"):
    """A lock on ``folder`` across the processes of one test run (``pytest -n 2`` runs two workers):
    the book builds that write ``_build/`` run one at a time."""
    from filelock import FileLock

    folder.mkdir(parents=True, exist_ok=True)
    return FileLock(folder / ".tests.lock")


def build_once(build: Callable[[], Path], folder: Path, run: str) -> Path:
    """``build()``, unless a process of the same test run (``run``: pytest-xdist's id of the run,
    '' without xdist) has already built into ``folder``; then what that process built.

    The processes take turns under ``build_lock``; the first of a run builds and leaves the run's
    id in a marker file, the others wait for it and return its site."""
    marker = folder / ".tests_built_site"
    with build_lock(folder):
        if run and marker.is_file() and marker.read_text(encoding="utf-8") == run:
            return folder / "html"
        marker.unlink(missing_ok=True)
        html = build()
        marker.write_text(run, encoding="utf-8")
        return html


@functools.cache
def built_site() -> Path:
    """The website, all three editions, built once per test run with warnings as errors
    (test_site.py checks it in a browser, test_pdf.py prints it, test_notebooks_zh.py its downloads)."""
    sys.path.insert(0, str(ROOT / "book" / "tools"))
    from build import build

    return build_once(
        lambda: build(execute=False, strict=True), ROOT / "_build", os.environ.get("PYTEST_XDIST_TESTRUNUID", "")
    )


def snapshot(root: Path) -> dict:
    """Every file under ``root`` with its bytes: to prove nothing was written or overwritten."""
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run_cli(*args, env=None, timeout=300) -> subprocess.CompletedProcess:
    """``python -m gputrain ARGS`` in a fresh process; ``env`` is added to this process's environment."""
    return subprocess.run(
        [sys.executable, "-m", "gputrain", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )


def run_bench_quick(script: Path, out: Path) -> tuple[dict, str]:
    """A bench script against TRL run with --quick, offline, on one thread: the JSON it wrote, and what it printed."""
    env = os.environ | {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    argv = [sys.executable, str(script), "--quick", "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text()), done.stdout


def accelerate_launch(nprocs: int = 2) -> list[str]:
    """``accelerate launch`` of ``nprocs`` gloo processes on this machine, each rendezvous on a free port:
    Accelerate's default, 29500, would collide between two tests running at once (``pytest -n 2``)."""
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or "accelerate"
    return [accelerate, "launch", "--multi_gpu", "--num_processes", str(nprocs), "--num_machines", "1"] + [
        "--main_process_port",
        "0",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
    ]


# The smallest GPT the tests train: a step takes milliseconds on a loaded CPU.
SMALL_GPT = dict(n_layer=1, n_head=2, n_embd=32, block_size=32, batch_size=8)
# A one-round speed ladder on a one-layer GPT.
TINY_LADDER = dict(
    n_layer=1,
    n_embd=32,
    block_size=32,
    batch_size=2,
    big_batch_size=4,
    steps=1,
    rounds=1,
    warmup=1,
    measured_peak=False,
)


def cli_flags(**fields) -> list[str]:
    """Config fields as command-line flags: ``n_layer=1`` -> ``--n-layer 1``, ``x=False`` -> ``--no-x``."""
    out: list[str] = []
    for name, value in fields.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + flag[2:])
        else:
            out += [flag, str(value)]
    return out


def as_at_a_terminal() -> None:
    """``preexec_fn`` for a child that a test interrupts with SIGINT: Ctrl-C's default action, as at a terminal.

    A process started in the background by a non-interactive shell (``make test &``)
    inherits SIGINT ignored, and gputrain keeps an ignored SIGINT (as nohup means it);
    the child a test sends Ctrl-C to must not inherit that from how pytest was started.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def import_graph(package: Path) -> dict[str, set[str]]:
    """Which gputrain module imports which (every import statement, TYPE_CHECKING blocks included)."""
    modules = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = ".".join(here[: len(here) - node.level + 1] + [node.module or ""]).strip(".")
                base = base if node.level else node.module or ""
                submodules = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
                # `from . import ops` in a package's module reads the sibling, not the package's __init__
                targets = submodules if submodules and len(submodules) == len(node.names) else [base, *submodules]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


TINY_RL = dict(n_problems=32, digits=1, group_size=4, max_new_tokens=8)  # GRPOSettings of the RL tests
TINY_RL_RUN = dict(batch_size=4, warmup_steps=1, progress=False)  # and their TrainConfig overrides


def tiny_chat_checkpoint(root: Path) -> Path:
    """A 1-layer GPT pretrained 3 steps on code, then fine-tuned 30 steps on 40 one-digit sums: the RL tests' start.

    Near-uniform over its bytes, it almost never answers right: tests that need rewards to vary give their own.
    """
    from gputrain.posttrain import finetune, problems
    from gputrain.train import TrainConfig, train

    text = root / "code.py"
    text.write_text("def add(a, b):\n    return a + b\n\n" * 300)
    base = dict(n_layer=1, n_head=2, n_embd=32, block_size=64, batch_size=4, eval_interval=0, warmup_steps=1)
    train(TrainConfig(**base, data=str(text), max_steps=3, checkpoint_dir=str(root / "base"), progress=False))
    records = [{"messages": p.messages()} for p in problems("arithmetic", 40, split="train", digits=1, ops=("+",))]
    finetune(root / "base", records, max_steps=30, checkpoint_dir=str(root / "sft"), batch_size=8, progress=False)
    return root / "sft"

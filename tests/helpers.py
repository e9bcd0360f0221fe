"""Helpers shared by several test files (tests/ is on sys.path via pytest.ini's pythonpath)."""

import os
import subprocess
import sys
from pathlib import Path


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

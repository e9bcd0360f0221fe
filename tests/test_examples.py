"""The scripts in companion/examples run as printed in the book and do what they say."""

import re
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "companion" / "examples"


def test_twenty_line_loop_trains():
    source = (EXAMPLES / "loop.py").read_text()
    body = [line for line in source.split('"""', 2)[2].splitlines() if line.strip()]
    assert len(body) <= 22, f"the introduction promises about twenty lines; it has {len(body)}"
    out = subprocess.run([sys.executable, str(EXAMPLES / "loop.py")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    losses = [float(v) for v in re.findall(r"loss (\d+\.\d+)", out.stdout)]
    assert len(losses) == 5
    assert losses[0] > 5.0 and losses[-1] < 0.6 * losses[0], losses

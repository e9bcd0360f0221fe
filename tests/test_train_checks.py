"""Issue 30, CLI defects: non-finite numbers, checks before torch loads, and what `gputrain eval --data` scores."""

import dataclasses
import math
import subprocess
import sys

import pytest

from gputrain.cli import main
from gputrain.train import TrainConfig

FLOAT_FIELDS = [f.name for f in dataclasses.fields(TrainConfig) if isinstance(f.default, float)]


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("name", FLOAT_FIELDS)
def test_every_float_field_refuses_a_value_that_is_not_finite(name, value):
    """grad_clip=nan switched clipping off; weight_decay=nan/inf were accepted (a run's loss went to nan)."""
    with pytest.raises(ValueError, match=f"^{name} must be a finite number, got {value}$"):
        TrainConfig(**{name: value})


@pytest.mark.parametrize(
    "flags", [["--grad-clip", "nan"], ["--weight-decay", "inf"], ["--weight-decay", "nan"], ["--lr=-inf"]]
)
def test_a_float_flag_that_is_not_finite_is_one_line_exit_2(tmp_path, monkeypatch, capsys, flags):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["train", *flags])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.strip().count("\n") == 0 and f"argument {flags[0].split('=')[0]}: must be a finite number" in err
    assert not list(tmp_path.iterdir())


# the command exits with torch never imported, or says which module imported it
WITHOUT_TORCH = """
import sys
from gputrain.cli import main
code = main(sys.argv[1:])
print(code, 'torch' in sys.modules)
"""


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--lr", "-1"], "lr must be a positive number, got -1.0"),
        (["--batch-size", "0"], "batch_size must be >= 1, got 0"),
        (["--val-fraction", "1"], "val_fraction must be in (0, 1), got 1.0"),
        (["--max-steps", "5"], "warmup_steps=20 exceeds max_steps=5; shorten the warmup"),
        (["--seq-len", "65"], "seq_len=65 exceeds the model's context block_size=64"),
    ],
)
def test_a_bad_value_is_answered_before_torch_loads(tmp_path, flags, message):
    """They came after importing torch: 2.2-5 s for a one-line error (0.3 s now)."""
    out = subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH, "train", *flags], capture_output=True, text=True, cwd=tmp_path
    )
    assert out.stdout.split() == ["2", "False"], out.stdout + out.stderr
    assert out.stderr.strip().count("\n") == 0 and message in out.stderr

import json
import os

import pytest
from helpers import run_cli
from package_layout import check_exports, check_layout

from gputrain.cli import main


def test_help_lists_commands():
    out = run_cli("--help")
    assert out.returncode == 0
    assert "info" in out.stdout and "train" in out.stdout


def test_train_help_documents_every_config_flag():
    import dataclasses

    from gputrain.train import TrainConfig

    out = run_cli("train", "--help")
    assert out.returncode == 0
    for f in dataclasses.fields(TrainConfig):
        assert "--" + f.name.replace("_", "-") in out.stdout


def test_info_json_reports_preset_and_versions():
    out = run_cli("info", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["preset"] in ("cpu", "gpu") and data["torch"]


def test_bad_preset_env_is_one_line_exit_2():
    out = run_cli("info", env={"GPUTRAIN_PRESET": "nonsense"})
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "cpu, gpu" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("flags", [["--lr", "-3e-4"], ["--batch-size", "0"]])
def test_bad_train_flag_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, monkeypatch, flags):
    before = set(os.listdir(tmp_path))
    monkeypatch.chdir(tmp_path)
    code = main(["train", *flags])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().count("\n") == 0 and "error:" in err
    assert set(os.listdir(tmp_path)) == before


def test_usage_error_is_one_line_exit_2():
    out = run_cli("train", "--no-such-flag")
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "--help" in out.stderr


def test_the_cli_package_stays_in_modules_a_reader_can_hold():
    """cli.py had grown to 615 lines holding seven commands; now one command per module, imports flowing one way."""
    check_layout("gputrain.cli")
    check_exports("gputrain.cli")

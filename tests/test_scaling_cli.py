"""``gputrain scale`` (chapter 14): compute-optimal N, D, loss and GPU time; bad input is one line and exit 2."""

import json

import pytest

from gputrain.cli import main
from gputrain.scaling import CHINCHILLA, compute_optimal


def test_scale_prints_chinchillas_answer_and_gpu_time(capsys):
    assert main(["scale", "--budget", "5.76e23", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    best = compute_optimal(CHINCHILLA, 5.76e23)
    assert out["N"] == pytest.approx(best["N"]) and out["D"] == pytest.approx(best["D"])
    assert out["gpu"] == "H100" and out["gpu_hours"] == pytest.approx(5.76e23 / (989.4e12 * 0.4) / 3600)
    assert main(["scale", "--budget", "1e21", "--gpu", "H800", "--mfu", "0.3"]) == 0
    text = capsys.readouterr().out
    assert "H800 at 30% MFU" in text and "tokens per parameter" in text


def test_scale_reads_a_fit_file(tmp_path, capsys):
    path = tmp_path / "fit.json"
    law = {"E": 1.0, "A": 50.0, "B": 80.0, "alpha": 0.4, "beta": 0.35}
    path.write_text(json.dumps({"data": {"fits": {"parametric": {"law": law}}}}))
    assert main(["scale", "--budget", "1e15", "--fit", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["loss"] > 1.0 and str(path) in out["law"]


@pytest.mark.parametrize(
    "args, words",
    [
        (["--budget", "-1"], "positive"),
        (["--budget", "0"], "positive"),
        (["--budget", "inf"], "finite"),
        (["--budget", "nan"], "finite"),
        (["--budget", "1e21", "--gpu", "H900"], "GPU_SPECS"),
        (["--budget", "1e21", "--mfu", "1.5"], "--mfu"),
        (["--budget", "1e21", "--fit", "/no/such/file.json"], "cannot read"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, words, capsys):
    try:
        code = main(["scale", *args])
    except SystemExit as exc:  # argparse rejects a non-finite number before the command runs
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and words in err


def test_a_fit_file_without_a_law_is_one_line(tmp_path, capsys):
    for text in ("not json", json.dumps({"data": {"runs": []}})):
        path = tmp_path / "bad.json"
        path.write_text(text)
        assert main(["scale", "--budget", "1e21", "--fit", str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and str(path) in err

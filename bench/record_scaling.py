"""Record chapter 14's IsoFLOP sweep on this CPU, predict a 10x run from it, then train that run (issue 34).

    python bench/record_scaling.py [--out book/results/scaling_cpu.json] [--phase all|sweep|predict|tenx]

One thread (``torch.set_num_threads(1)``): the machine is shared.  Throughput
was measured first (on a quiet machine about 25 GFLOP/s for a 33 K-parameter
GPT, 50-80 for 0.1-1.3 M, plus a few milliseconds of loop per step); the
budgets were first sized for half an hour on one thread of a quiet machine
(1.25e11 doubling to 2e12); shared with three other jobs, the machine ran the
small models at a third of that speed, and the budgets became five steps of
sqrt 2 (a 4x range of compute) to fit the same half hour.

Phases, in order (``all`` runs them one after another):

* ``sweep``: five budgets (1.25e11 FLOPs, up by sqrt 2 each to 5e11) x six sizes of
  :data:`gputrain.scaling.LADDER`, each with its own cosine schedule;
* ``predict``: the three Chinchilla fits of the stored runs with bootstrap
  intervals, the compute-optimal size for 10x the largest budget, and the
  parametric fit's predicted loss for it, written to the file *before* it trains;
* ``tenx``: trains that run and stores the measured loss beside the prediction.

Every phase rewrites the file with the phases before it kept, so the
prediction carries a date earlier than the measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from gputrain.device import cpu_name

ROOT = Path(__file__).resolve().parents[1]
BUDGETS = [1.25e11 * 2 ** (k / 2) for k in range(5)]
TENX = 10
DATA = dict(data="stdlib", corpus_bytes=40_000_000, cache_dir="")  # all of the stdlib (about 31.5 MB)
EVAL_WINDOWS = 512
BOOTSTRAP = 200


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def save(path: Path, data: dict, command: str) -> None:
    from gputrain.results import write_result

    write_result(path, data, command=command)


def load(path: Path) -> dict:
    return json.loads(path.read_text())["data"] if path.exists() else {}


def corpus_line() -> dict:
    """How many tokens the corpus holds, against the tokens the runs read: no window is seen twice."""
    from gputrain.scaling import LADDER, plan_run, train_config
    from gputrain.train import build_data

    cfg = train_config(plan_run(LADDER[0], BUDGETS[0]), **DATA)
    train_set, val_set = build_data(cfg)
    return {"train_tokens": len(train_set) * cfg.window, "val_tokens": len(val_set) * cfg.window}


def phase_sweep(data: dict) -> None:
    from gputrain.scaling import Shape, plan_sweep, run

    data["corpus"] = corpus_line()
    data["budgets"] = BUDGETS
    data["runs"] = data.get("runs", []) if data.get("resumed") else []
    done = {(r["budget"], Shape(**r["shape"]).label) for r in data["runs"]}
    plans = plan_sweep(BUDGETS)
    start = time.perf_counter()
    for i, plan in enumerate(plans):
        if (plan.budget, plan.shape.label) in done:
            continue
        rec = run(plan, eval_windows=EVAL_WINDOWS, **DATA)
        data["runs"].append(rec)
        print(
            f"[{i + 1}/{len(plans)}] C={plan.budget:.2e} {plan.shape.label} N={rec['params']['total']:,} "
            f"D={rec['tokens']:,} loss={rec['loss']:.4f} {rec['wall_seconds']:.0f}s",
            flush=True,
        )
        yield
    data.setdefault("wall_seconds", {})["sweep"] = data.get("wall_seconds", {}).get("sweep", 0) + (
        time.perf_counter() - start
    )


def phase_predict(data: dict) -> None:
    from gputrain.scaling import fit_all, predict_run

    start = time.perf_counter()
    budget = TENX * max(BUDGETS)
    data["fits"] = fit_all(data["runs"], count="total", n_boot=BOOTSTRAP, seed=0)
    data["prediction"] = predict_run(data["fits"], budget, max_tokens=data["corpus"]["train_tokens"])
    data["prediction"]["written"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    data.setdefault("wall_seconds", {})["predict"] = time.perf_counter() - start
    p = data["prediction"]
    print(f"predicted: {p['label']} at {budget:.2e} FLOPs -> loss {p['loss']:.4f} {p['interval']}", flush=True)


def phase_tenx(data: dict) -> None:
    from gputrain.scaling import Shape, plan_run, run

    start = time.perf_counter()
    p = data["prediction"]
    plan = plan_run(Shape(**p["shape"]), p["budget"])
    data["tenx"] = run(plan, eval_windows=EVAL_WINDOWS, **DATA)
    data["tenx"]["written"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    data.setdefault("wall_seconds", {})["tenx"] = time.perf_counter() - start
    measured = data["tenx"]["loss"]
    print(f"measured: {measured:.4f} (predicted {p['loss']:.4f}, error {100 * (p['loss'] / measured - 1):+.2f}%)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "book/results/scaling_cpu.json"))
    ap.add_argument("--phase", choices=("all", "sweep", "predict", "tenx"), default="all")
    ap.add_argument("--resume", action="store_true", help="keep the runs already in --out (after a crash)")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    out = Path(args.out)
    data = load(out) if args.phase != "all" or args.resume else {}
    data["resumed"] = bool(args.resume)
    data.update(cpu=cpu_name(), threads=1, git_commit=git_commit(), torch=torch.__version__)
    command = "python bench/record_scaling.py " + " ".join(argv if argv is not None else sys.argv[1:])
    t0 = time.perf_counter()
    if args.phase in ("all", "sweep"):
        for _ in phase_sweep(data):
            save(out, data, command)
        save(out, data, command)
    if args.phase in ("all", "predict"):
        phase_predict(data)
        save(out, data, command)
    if args.phase in ("all", "tenx"):
        phase_tenx(data)
        save(out, data, command)
    print(f"record-scaling: {time.perf_counter() - t0:.0f} s wall on one thread", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

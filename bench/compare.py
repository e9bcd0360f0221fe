"""Two training commands side by side: wall time, CPU time and peak RSS, runs alternated (issue 24).

    python bench/compare.py --nanogpt PATH [--pairs 5] [--json out.json]
    python bench/compare.py --a "gputrain train ..." --b "python other.py ..." [--b-cwd DIR]

Each pair runs both commands one after the other, the order flipping every pair
(A B, B A, A B ...), so a change of machine load lands on both alike.  Every
run is a fresh process, measured whole (imports, data, training, exit) with
``os.wait4``: wall time, user + system CPU time and the peak resident set size
that the kernel records.  The table gives min / median / max per command, and
B / A as two ratios: the median of the per-pair ratios (the headline: each pair
shares its minute of machine load) and the ratio of the medians.

``--nanogpt PATH`` runs the comparison of issue 24 against a nanoGPT checkout
(github.com/karpathy/nanoGPT; its code stays outside this repository).  Both
programs train the same 8,000,000 bytes of this Python's standard library
(gputrain's own reader; the trailing 10% held out; nanoGPT gets them as the
uint16 ``train.bin``/``val.bin`` its ``get_batch`` reads, under
``PATH/data/gputrain_stdlib``), byte vocabulary, a GPT of 4 layers x 128, 4
heads, context 128, batch 32, fp32, AdamW (lr 3e-3, betas 0.9/0.95, weight
decay 0.1, clip 1.0, warmup 20 then cosine to a tenth), dropout 0, no biases,
tied embeddings, GELU (exact), SDPA attention, 60 optimizer steps, no
torch.compile, one validation pass of 8 batches, no checkpoint.

Differences that remain:
- batches: gputrain walks shuffled non-overlapping windows of the training
  split (an epoch sees each once); nanoGPT draws 32 random offsets per step
  from a memory map it reopens every step;
- evaluation: nanoGPT evaluates before the first step, 4 batches of train and
  4 of validation (``estimate_loss``); gputrain evaluates 8 validation batches
  after the last;
- bookkeeping: gputrain reads loss and gradient norm back every step and runs
  its spike detector and non-finite guard (no metrics.csv here: no
  ``--log-dir``); nanoGPT reads the loss back and prints a line every step
  (its default ``log_interval`` of 1);
- nanoGPT's loop is one script; gputrain's goes through Accelerate.
"""

from __future__ import annotations

import argparse
import os
import pickle
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

STEPS, CORPUS_BYTES = 60, 8_000_000
SHAPE = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 128, "batch_size": 32}
HYPER = {"lr": 3e-3, "beta1": 0.9, "beta2": 0.95, "weight_decay": 0.1, "grad_clip": 1.0, "warmup": 20}


def measure(command: list[str], cwd: str | None = None) -> dict:
    """Run ``command`` to the end; its wall seconds, CPU seconds and peak RSS (MiB)."""
    from gputrain.speed import process_cost

    try:
        return process_cost(command, cwd)
    except RuntimeError as exc:
        sys.exit(f"compare: {exc}")


def nanogpt_data(repo: Path) -> str:
    """Write the shared corpus as nanoGPT's dataset ``gputrain_stdlib`` (once); return its name."""
    import numpy as np

    from gputrain.data import split_tokens
    from gputrain.train import TrainConfig
    from gputrain.train.inputs import load_tokens

    folder = repo / "data" / "gputrain_stdlib"
    if not (folder / "meta.pkl").exists():
        cfg = TrainConfig(corpus_bytes=CORPUS_BYTES)
        _, corpus = load_tokens(cfg)
        train, val = split_tokens(corpus.tokens, cfg.val_fraction)
        folder.mkdir(parents=True, exist_ok=True)
        np.asarray(train.numpy(), dtype=np.uint16).tofile(folder / "train.bin")
        np.asarray(val.numpy(), dtype=np.uint16).tofile(folder / "val.bin")
        with open(folder / "meta.pkl", "wb") as f:
            pickle.dump({"vocab_size": 256}, f)
    return folder.name


def nanogpt_commands(repo: Path, out_dir: str) -> tuple[list[str], list[str]]:
    """gputrain's and nanoGPT's command lines at the configuration in this file's header."""
    ours = [sys.executable, "-m", "gputrain", "train", "--data", "stdlib", "--corpus-bytes", str(CORPUS_BYTES)]
    ours += [f"--{k.replace('_', '-')}={v}" for k, v in SHAPE.items()]
    ours += [f"--max-steps={STEPS}", f"--lr={HYPER['lr']}", f"--beta1={HYPER['beta1']}", f"--beta2={HYPER['beta2']}"]
    ours += [f"--weight-decay={HYPER['weight_decay']}", f"--grad-clip={HYPER['grad_clip']}"]
    ours += [f"--warmup-steps={HYPER['warmup']}", "--dropout=0", "--no-bias", "--tie-embeddings", "--quiet"]
    ours += [f"--eval-interval={STEPS}", "--eval-batches=8", "--no-compile", "--mixed-precision=no"]
    theirs = [sys.executable, "train.py", f"--dataset={nanogpt_data(repo)}", "--device=cpu", "--compile=False"]
    theirs += ["--dtype=float32", f"--out_dir={out_dir}", "--gradient_accumulation_steps=1", "--wandb_log=False"]
    theirs += [f"--{k}={v}" for k, v in SHAPE.items()]
    theirs += [f"--max_iters={STEPS - 1}", f"--lr_decay_iters={STEPS}", f"--warmup_iters={HYPER['warmup']}"]
    theirs += [f"--learning_rate={HYPER['lr']}", f"--min_lr={HYPER['lr'] / 10}", f"--beta1={HYPER['beta1']}"]
    theirs += [f"--beta2={HYPER['beta2']}", f"--weight_decay={HYPER['weight_decay']}"]
    theirs += [f"--grad_clip={HYPER['grad_clip']}", "--dropout=0.0", "--bias=False", "--eval_iters=4"]
    theirs += ["--eval_interval=100000", "--always_save_checkpoint=False"]  # max_iters 59: steps 0..59, 60 in all
    return ours, theirs


def summary(runs: list[dict], key: str) -> tuple[float, float, float]:
    values = [r[key] for r in runs]
    return min(values), statistics.median(values), max(values)


def report(names: tuple[str, str], a: list[dict], b: list[dict]) -> dict:
    """Print the table; return it as a dict."""
    rows = {}
    print(f"{'':10} {'':>10}  {'min':>9} {'median':>9} {'max':>9}")
    for key, unit in (("wall_s", "s"), ("cpu_s", "s"), ("rss_mib", "MiB")):
        for name, runs in zip(names, (a, b)):
            lo, mid, hi = summary(runs, key)
            print(f"{name:10} {key:>10}  {lo:9.2f} {mid:9.2f} {hi:9.2f}  {unit}")
        per_pair = statistics.median(x[key] / y[key] for x, y in zip(a, b))
        of_medians = summary(a, key)[1] / summary(b, key)[1]
        rows[key] = {"per_pair_ratio": per_pair, "ratio_of_medians": of_medians}
        print(f"{names[0]} / {names[1]}: median per-pair ratio {per_pair:.3f}, ratio of medians {of_medians:.3f}")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nanogpt", type=Path, help="a nanoGPT checkout: run issue 24's comparison against it")
    parser.add_argument("--a", help="first command (default with --nanogpt: gputrain train at the config)")
    parser.add_argument("--b", help="second command (default with --nanogpt: nanoGPT's train.py)")
    parser.add_argument("--b-cwd", help="working directory of the second command")
    parser.add_argument("--names", default="gputrain,nanoGPT", help="the two commands' names, comma-separated")
    parser.add_argument("--pairs", type=int, default=5, help="alternated pairs of runs (default 5)")
    parser.add_argument(
        "--json", type=Path, help="also write every run, the ratios, the CPU and versions here (book/results/...)"
    )
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error(f"--pairs must be >= 1, got {args.pairs}")
    if args.nanogpt and not (args.nanogpt / "train.py").is_file():
        parser.error(f"--nanogpt {args.nanogpt}: no train.py there; clone github.com/karpathy/nanoGPT first")
    if not args.nanogpt and not (args.a and args.b):
        parser.error("give --nanogpt PATH, or both --a and --b")
    names = tuple(args.names.split(","))
    if len(names) != 2:
        parser.error(f"--names takes two names separated by a comma, got {args.names!r}")
    with tempfile.TemporaryDirectory() as out_dir:
        a_cmd, b_cmd, b_cwd = None, None, args.b_cwd
        if args.nanogpt:
            a_cmd, b_cmd = nanogpt_commands(args.nanogpt.resolve(), out_dir)
            b_cwd = b_cwd or str(args.nanogpt)
        a_cmd = shlex.split(args.a) if args.a else a_cmd
        b_cmd = shlex.split(args.b) if args.b else b_cmd
        print(f"A ({names[0]}): {shlex.join(a_cmd)}\nB ({names[1]}): {shlex.join(b_cmd)}  [in {b_cwd or '.'}]")
        a, b = [], []
        for i in range(args.pairs):
            order = ((a, a_cmd, None), (b, b_cmd, b_cwd))
            for runs, command, cwd in order if i % 2 == 0 else order[::-1]:
                runs.append(measure(command, cwd) | {"load1": os.getloadavg()[0]})
            print(
                f"pair {i + 1}: {names[0]} {a[-1]['wall_s']:.2f} s {a[-1]['rss_mib']:.0f} MiB, "
                f"{names[1]} {b[-1]['wall_s']:.2f} s {b[-1]['rss_mib']:.0f} MiB, load {a[-1]['load1']:.2f}",
                flush=True,
            )
    ratios = report(names, a, b)
    if args.json:
        from gputrain.device import cpu_name
        from gputrain.results import write_result

        record = {"names": names, "a": a, "b": b, "ratios": ratios, "commands": [a_cmd, b_cmd]}
        record |= {"cpu": cpu_name(), "cores": os.cpu_count(), "b_revision": revision(b_cwd)}
        write_result(args.json, record, command=shlex.join(["python", "bench/compare.py", *sys.argv[1:]]))
    return 0


def revision(folder: str | None) -> str | None:
    """The git commit checked out in ``folder`` (the second command's checkout), or None."""
    if not folder:
        return None
    out = subprocess.run(["git", "-C", folder, "rev-parse", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or None if out.returncode == 0 else None


if __name__ == "__main__":
    sys.exit(main())

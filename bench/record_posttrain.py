"""Chapter 12's sweeps, recorded: base vs SFT, the synthetic-data curve, the forgetting ledger, the lr sweep.

    python bench/record_posttrain.py [--out book/results/posttrain_cpu.json] [--quick]

``make record-posttrain`` runs it.  One base GPT is pretrained on the standard
library's source, then fine-tuned many times on the arithmetic task
(``gputrain.posttrain.problems``: two-digit addition in a chat turn, answer as
``Answer: N``), each run scored on the same 200 held-out test problems:

* base vs SFT: the base model few-shot and full fine-tuning, 3 seeds each,
  greedy accuracy and pass@k (k = 1..16, 16 samples at temperature 1);
* the synthetic-data curve: accuracy against the number of distinct training
  problems, the steps held fixed (fewer problems: more epochs over them);
* the forgetting ledger: bits per byte on the pretraining text's held-out
  split before and after, for full fine-tuning and LoRA at r = 1, 4, 16, 64,
  and the rank that holds 90% of the full update's energy, layer by layer;
* learning-rate sensitivity: full fine-tuning at six learning rates x 3 seeds.

A seed sets the fine-tuning's data order, the new token rows and LoRA's A;
the base model and the test problems are the same in every run.  Every run's
numbers and the whole configuration are written with their provenance; the
chapter recomputes its figures from this file and asserts them.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from gputrain.device import cpu_name
from gputrain.posttrain import (
    ChatFormat,
    chat_model,
    evaluate_task,
    finetune,
    problems,
    text_bits_per_byte,
    update_ranks,
)
from gputrain.results import write_result
from gputrain.train import TrainConfig, build_data, train

BASE = dict(n_layer=2, n_head=4, n_embd=64, block_size=128, batch_size=32, max_steps=1500, lr=3e-3)
BASE.update(warmup_steps=50, eval_interval=0, seed=1337, corpus_bytes=400_000)
TASK = dict(task="arithmetic", digits=2, ops=["+"], n_train=4000, n_test=200, seed=0)
# the test problems judge each run; 5% of its training problems are held out only for the loop's validation loss
SFT = dict(max_steps=1000, batch_size=64, warmup_steps=20, val_fraction=0.05, eval_batches=4)
FULL_LR, LORA_LR = 2e-3, 4e-3
SEEDS = (0, 1, 2)
CURVE = (125, 250, 500, 1000, 2000)  # and n_train itself, from the base-vs-SFT runs
RANKS = (1, 4, 16, 64)
LRS = (1e-4, 3e-4, 1e-3, 2e-3, 3e-3, 1e-2)
SAMPLES = 16
QUICK = dict(base_steps=60, sft_steps=30, n_test=24, n_train=300, curve=(100,), ranks=(1, 4), lrs=(1e-3, 3e-3))
QUICK["seeds"] = (0, 1)


def finished(result):
    """``result`` of a run that ran to its end; a run Ctrl-C or SIGTERM stopped ends the whole recording."""
    if result.interrupted:
        raise SystemExit(f"stopped by {result.interrupted} after step {result.steps}: nothing was recorded")
    return result


def pretrain(root: Path, steps: int) -> tuple[Path, torch.Tensor, float, float]:
    """The base GPT: its checkpoint, its held-out pretraining tokens, its bits per byte there, the seconds."""
    cfg = TrainConfig(**{**BASE, "max_steps": steps, "checkpoint_dir": str(root / "base"), "progress": False})
    t0 = time.perf_counter()
    result = finished(train(cfg))
    seconds = time.perf_counter() - t0
    val_tokens = build_data(cfg)[1].tokens  # the trailing 10% of the text the base never trained on
    return root / "base", val_tokens, text_bits_per_byte(result.model, val_tokens), seconds


def score(model, fmt, test, seed: int, samples: int, shots=None) -> dict:
    """Greedy accuracy (and pass@k when ``samples``) on the test problems, as a dict without the replies."""
    ks = tuple(range(1, samples + 1)) if samples else ()
    r = evaluate_task(model, fmt, test, samples=samples, ks=ks, seed=seed, shots=shots, digits=TASK["digits"])
    d = r.to_dict()
    d.pop("replies", None)
    return d


def one_run(name: str, base: Path, records, val_tokens, test, *, seed, lr, steps, samples=0, rank=0, keep=None):
    """Fine-tune, then score: accuracy, bits per byte on the pretraining text, time; ``keep`` gets the model."""
    t0 = time.perf_counter()
    result = finished(finetune(
        str(base), records, lora_rank=rank, seed=seed, lr=lr, **{**SFT, "max_steps": steps},
        eval_interval=steps, progress=False,
    ))  # fmt: skip
    seconds = time.perf_counter() - t0
    model = result.model.eval()
    held = max(1, round(SFT["val_fraction"] * len(records)))  # what split_examples holds out
    row = dict(name=name, kind="lora" if rank else "full", rank=rank, lr=lr, seed=seed, n_train=len(records) - held)
    row.update(steps=result.steps, seconds=round(seconds, 2), train_loss=result.losses[-1])
    row.update(val_loss=result.val_losses[-1][1] if result.val_losses else None)
    row.update(trainable=sum(p.numel() for p in model.parameters() if p.requires_grad))
    row.update(bpb_after=text_bits_per_byte(model, val_tokens), score=score(model, ChatFormat(), test, seed, samples))
    row.update(bpb_after_bytes_only=text_bits_per_byte(model, val_tokens, bytes_only=True))
    if keep is not None:
        keep[name] = model
    print(f"  {name}: {seconds:.1f} s, greedy {row['score']['greedy']['value']:.3f}, bpb {row['bpb_after']:.4f}"
          f" ({row['bpb_after_bytes_only']:.4f} over the bytes alone)")  # fmt: skip
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="book/results/posttrain_cpu.json")
    ap.add_argument("--quick", action="store_true", help="a small version for the tests (minutes -> seconds)")
    args = ap.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    q = QUICK if args.quick else {}
    base_steps, steps = q.get("base_steps", BASE["max_steps"]), q.get("sft_steps", SFT["max_steps"])
    n_test, n_train = q.get("n_test", TASK["n_test"]), q.get("n_train", TASK["n_train"])
    seeds, curve = q.get("seeds", SEEDS), q.get("curve", CURVE)
    ranks, lrs = q.get("ranks", RANKS), q.get("lrs", LRS)
    t_start = time.perf_counter()
    task = dict(digits=TASK["digits"], ops=tuple(TASK["ops"]), seed=TASK["seed"])
    test = problems(TASK["task"], n_test, split="test", **task)
    pool = problems(TASK["task"], n_train, split="train", **task)
    records = [{"messages": p.messages()} for p in pool]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print(f"pretraining the base ({base_steps} steps)")
        base, val_tokens, base_bpb, base_seconds = pretrain(root, base_steps)
        from gputrain.posttrain import load_chat_model

        base_model = load_chat_model(base)[0]
        base_params = sum(p.numel() for p in base_model.parameters())
        grown = chat_model(base_model, ChatFormat())  # the four reserved rows added, nothing trained yet
        grown_bpb = text_bits_per_byte(grown, val_tokens)
        few_shot = [score(base_model, None, test, s, SAMPLES) for s in seeds]
        print(f"  base: bpb {base_bpb:.4f}, few-shot greedy {[f['greedy']['value'] for f in few_shot]}")
        runs, models = [], {}
        for s in seeds:  # base vs SFT (full fine-tuning at FULL_LR on every problem)
            runs.append(one_run(f"full-s{s}", base, records, val_tokens, test, seed=s, lr=FULL_LR, steps=steps,
                                samples=SAMPLES, keep=models if s == seeds[0] else None))  # fmt: skip
        for n in curve:  # the synthetic-data curve: the first n problems of the same pool
            runs.append(one_run(f"curve-n{n}", base, records[:n], val_tokens, test, seed=seeds[0], lr=FULL_LR,
                                steps=steps))  # fmt: skip
        for r in ranks:  # the forgetting ledger's LoRA rows
            runs.append(one_run(f"lora-r{r}", base, records, val_tokens, test, seed=seeds[0], lr=LORA_LR, steps=steps,
                                samples=SAMPLES, rank=r))  # fmt: skip
        for lr in lrs:  # learning-rate sensitivity (FULL_LR's seeds are the base-vs-SFT runs)
            for s in seeds:
                if lr != FULL_LR:
                    runs.append(one_run(f"lr{lr:g}-s{s}", base, records, val_tokens, test, seed=s, lr=lr,
                                        steps=steps))  # fmt: skip
        ranks90 = update_ranks(grown, models[f"full-s{seeds[0]}"], energy=0.9)
    data = dict(
        settings=dict(
            base=BASE | {"max_steps": base_steps},
            task=TASK | {"n_test": n_test, "n_train": n_train},
            sft=SFT | {"max_steps": steps},
            full_lr=FULL_LR,
            lora_lr=LORA_LR,
            seeds=list(seeds),
            samples=SAMPLES,
            quick=args.quick,
        ),  # fmt: skip
        base=dict(
            bpb=base_bpb, bpb_grown=grown_bpb, seconds=round(base_seconds, 2), few_shot=few_shot, params=base_params
        ),
        runs=runs,
        update_rank90=ranks90,
        wall_seconds=round(time.perf_counter() - t_start, 1),
        cpu=cpu_name(),
        threads=torch.get_num_threads(),
    )
    write_result(args.out, data, command=" ".join(["python", *sys.argv]))
    print(f"wrote {args.out}: {len(runs)} fine-tuning runs in {data['wall_seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Chapter 13's experiments, recorded: GRPO from the SFT model, an equal-compute SFT control, the loss-type lab.

    python bench/record_rewards.py [--out book/results/rewards_cpu.json] [--parts start,grpo,control,lab,igpt]
                                   [--workdir DIR] [--quick]

``make record-rewards`` runs it.  The start is chapter 12's: the same base GPT
(:mod:`record_posttrain`'s settings, pretrained on the standard library's
source) fine-tuned on two-digit addition in a chat turn with its seed-0
settings.  Every run is scored on the same 200 held-out test problems:

* start: the SFT model's greedy accuracy and pass@k (k = 1..16, 16 samples
  at temperature 1);
* grpo: GRPO on the task's train problems, graded exactly, over seeds; a
  checkpoint every ``EVERY`` steps is scored afterwards (greedy and pass@k), so
  accuracy against step comes from one uninterrupted run;
* control: the same seconds spent on more SFT from the same start, scored
  the same way at the same fractions of the time;
* lab: TRL's four loss types x group std scaling on and off, two updates
  per rollout (so the clip acts), each step's logged loss, reward, share of
  groups with zero advantage, entropy, clip fraction, lengths of right and
  wrong replies;
* igpt: InstructGPT in miniature (see :func:`igpt`).

``--workdir`` keeps the base and SFT checkpoints between invocations (a
recording in parts); ``--parts`` replaces only those parts of an existing
``--out`` and keeps the rest.  The chapter recomputes its figures from the file
and asserts them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record_posttrain import FULL_LR, SFT, TASK, finished, pretrain, score  # noqa: E402  the start is chapter 12's

from gputrain.device import cpu_name  # noqa: E402
from gputrain.posttrain import (  # noqa: E402
    ChatFormat,
    GRPOSettings,
    as_reward,
    final_answer,
    finetune,
    grade,
    load_chat_model,
    pairwise_accuracy,
    policy_logprobs,
    prefer,
    problems,
    reinforce,
    reward_pairs,
    rollout,
    train_reward_model,
)
from gputrain.results import write_result  # noqa: E402
from gputrain.train import list_checkpoints  # noqa: E402

BASE_STEPS, SFT_SEED = 1500, 0
N_TEST, SAMPLES = TASK["n_test"], 16
GRPO = dict(task="arithmetic", digits=2, ops="+", n_problems=TASK["n_train"], group_size=8, max_new_tokens=12)
RL = dict(max_steps=200, batch_size=16, lr=1e-4, warmup_steps=5)  # lr 5e-4 and 1e-3 collapsed (reward 0.10 -> 0.01)
EVERY = 25  # steps between scored checkpoints
SEEDS = (0, 1, 2)
LAB = dict(max_steps=100, num_iterations=2, lr=2e-4)  # twice GRPO's lr: the loss types part sooner
LOSS_TYPES, SCALES = ("grpo", "dr_grpo", "dapo", "bnpo"), ("group", "none")
GOLD_SCALE = 10  # answers this far off the sum score 0
IGPT = dict(pair_problems=3000, measure_problems=100, measure_samples=4, rm_val_fraction=0.15, rm_steps=1000,
            rm_lr=3e-4, kl_coefs=(0.02, 0.0), ppo_steps=300, ppo_batch=16, ppo_group=4, ppo_lr=3e-5,
            dpo_betas=(0.1,), dpo_steps=300, dpo_lr=2e-5, every=25)  # fmt: skip
# the reward model at lr 1e-3 learned nothing in 1000 steps (held-out 0.54); 3e-4 reached 0.74 (train 0.84)
PARTS = ("start", "grpo", "control", "lab", "igpt")
QUICK = dict(base_steps=60, sft_steps=30, n_test=16, samples=4, rl_steps=4, every=2, seeds=(0, 1), lab_steps=2)
QUICK.update(pair_problems=80, measure_problems=8, rm_steps=4, ppo_steps=4, dpo_steps=4)


def task_args() -> dict:
    return dict(digits=TASK["digits"], ops=tuple(TASK["ops"]), seed=TASK["seed"])


def brief(d: dict) -> str:
    first = (d.get("pass_at") or {}).get("1", {}).get("value")
    return f"greedy {d['greedy']['value']:.3f}" + (f", pass@1 {first:.3f}" if first is not None else "")


def prepare(root: Path, q: dict) -> Path:
    """The SFT checkpoint every run starts from (made once per workdir): chapter 12's base, then its SFT."""
    sft = root / "sft"
    if list_checkpoints(sft) if sft.exists() else []:
        return sft
    print(f"pretraining the base ({q.get('base_steps', BASE_STEPS)} steps)", flush=True)
    base = pretrain(root, q.get("base_steps", BASE_STEPS))[0]
    steps = q.get("sft_steps", SFT["max_steps"])
    pool = problems(TASK["task"], q.get("n_train", TASK["n_train"]), split="train", **task_args())
    records = [{"messages": p.messages()} for p in pool]
    print(f"fine-tuning it ({steps} steps)", flush=True)
    cfg = {**SFT, "max_steps": steps, "eval_interval": steps}
    finished(finetune(str(base), records, seed=SFT_SEED, lr=FULL_LR, **cfg, progress=False, checkpoint_dir=str(sft)))
    return sft


def scored_checkpoints(run_dir: Path, test, seed: int, samples: int) -> list[dict]:
    """Each checkpoint a run kept, scored: [{step, score}], in step order."""
    rows = []
    for ckpt in list_checkpoints(run_dir):
        model = load_chat_model(str(ckpt))[0]
        step = int(ckpt.name.split("_")[-1])
        rows.append(dict(step=step, score=score(model.eval(), ChatFormat(), test, seed, samples)))
        print(f"    step {step}: {brief(rows[-1]['score'])}", flush=True)
    return rows


def grpo_run(sft: Path, out_dir: Path, seed: int, test, q: dict, *, settings: dict | None = None, **overrides):
    """One GRPO run from the SFT checkpoint: its per-step history, seconds and scored checkpoints."""
    steps, every = q.get("rl_steps", RL["max_steps"]), q.get("every", EVERY)
    s = GRPOSettings(**{**GRPO, **(settings or {})})
    t0 = time.perf_counter()
    rl = {**RL, "max_steps": steps, "warmup_steps": min(RL["warmup_steps"], steps // 2), **overrides}
    rl.update(checkpoint_dir=str(out_dir), checkpoint_interval=every, keep_checkpoints=steps // every + 1)
    result = finished(reinforce(str(sft), settings=s, **rl, seed=seed, progress=False))
    seconds = time.perf_counter() - t0
    history = result.model.history
    print(f"  {out_dir.name}: {steps} steps in {seconds:.1f} s", flush=True)
    return dict(seed=seed, settings=dataclasses.asdict(s), steps=steps, seconds=round(seconds, 2), losses=result.losses,
                history=history)  # fmt: skip


def sft_more(sft: Path, records, seed: int, steps: int, **overrides):
    """More SFT from the SFT checkpoint, at its settings; the warmup fits the steps."""
    cfg = {**SFT, "max_steps": steps, "warmup_steps": min(SFT["warmup_steps"], steps // 2)}
    return finished(finetune(str(sft), records, seed=seed, lr=FULL_LR, **cfg, eval_interval=0, progress=False,
                             **overrides))  # fmt: skip


def part_start(sft: Path, test, q: dict) -> dict:
    model = load_chat_model(str(list_checkpoints(sft)[-1]))[0]
    rows = [score(model.eval(), ChatFormat(), test, s, q.get("samples", SAMPLES)) for s in q.get("seeds", SEEDS)]
    print(f"  start: {brief(rows[0])}", flush=True)
    return dict(scores=rows)


def part_grpo(sft: Path, root: Path, test, q: dict) -> dict:
    runs = []
    for seed in q.get("seeds", SEEDS):
        run = grpo_run(sft, root / f"grpo-s{seed}", seed, test, q)
        run["checkpoints"] = scored_checkpoints(root / f"grpo-s{seed}", test, seed, q.get("samples", SAMPLES))
        runs.append(run)
    return dict(settings=dict(grpo=GRPO, rl=RL, every=q.get("every", EVERY)), runs=runs)


def part_control(sft: Path, root: Path, test, q: dict, grpo: dict) -> dict:
    """More SFT from the same start for the GRPO runs' mean seconds, checkpoints at the same fractions."""
    seconds = sum(r["seconds"] for r in grpo["runs"]) / len(grpo["runs"])
    pool = problems(TASK["task"], q.get("n_train", TASK["n_train"]), split="train", **task_args())
    records = [{"messages": p.messages()} for p in pool]
    probe_steps = 10 if q else 40
    t0 = time.perf_counter()  # the SFT step's time on this machine now, to spend the same seconds
    sft_more(sft, records, 0, probe_steps)
    per_step = (time.perf_counter() - t0) / probe_steps
    rl_steps, every = q.get("rl_steps", RL["max_steps"]), q.get("every", EVERY)
    chunk = max(1, round(seconds / per_step * every / rl_steps))  # SFT steps per GRPO checkpoint interval
    steps = chunk * (rl_steps // every)
    runs = []
    for seed in q.get("seeds", SEEDS):
        out = root / f"control-s{seed}"
        t0 = time.perf_counter()
        sft_more(sft, records, seed, steps, checkpoint_dir=str(out), checkpoint_interval=chunk,
                 keep_checkpoints=steps // chunk + 1)  # fmt: skip
        took = time.perf_counter() - t0
        print(f"  control-s{seed}: {steps} SFT steps in {took:.1f} s (GRPO: {seconds:.1f} s)", flush=True)
        runs.append(dict(seed=seed, steps=steps, seconds=round(took, 2),
                         checkpoints=scored_checkpoints(out, test, seed, q.get("samples", SAMPLES))))  # fmt: skip
    return dict(grpo_seconds=round(seconds, 2), sft_step_seconds=per_step, chunk=chunk, runs=runs)


def part_lab(sft: Path, root: Path, test, q: dict) -> dict:
    runs = []
    lab = dict(LAB, max_steps=q.get("lab_steps", LAB["max_steps"]))
    for loss_type in LOSS_TYPES:
        for scale in SCALES:
            name = f"lab-{loss_type}-{scale}"
            settings = dict(loss_type=loss_type, scale_rewards=scale, num_iterations=lab["num_iterations"])
            qq = dict(q, rl_steps=lab["max_steps"], every=lab["max_steps"])
            run = grpo_run(sft, root / name, 0, test, qq, settings=settings, lr=lab["lr"])
            run.update(name=name, checkpoints=scored_checkpoints(root / name, test, 0, 0))
            runs.append(run)
    return dict(settings=lab, runs=runs)


def gold(problem, reply: str) -> float:
    """The gold reward no model ever sees: 1 for the exact sum, falling by 1/GOLD_SCALE per unit off, 0 if unparsed."""
    answer = final_answer(reply)
    return 0.0 if answer is None else max(0.0, 1.0 - abs(answer - problem.answer) / GOLD_SCALE)


def gold_reward(problems_by_question: dict):
    """The gold reward in TRL's reward-function form (the recorder's judge, never the learner's)."""

    def fn(prompts, completions, **_):
        return [gold(problems_by_question[p], c) for p, c in zip(prompts, completions)]

    return fn


def sample(model, asked, *, group_size: int, seed: int):
    """``group_size`` replies to each problem at temperature 1, as a Rollout and as texts."""
    fmt = ChatFormat()
    ro = rollout(model, [fmt.encode_prompt(p.prompt()) for p in asked], group_size=group_size, stop=fmt.end_id,
                 seed=seed, max_new_tokens=GRPO["max_new_tokens"])  # fmt: skip
    return ro, [fmt.reply(ids) for ids in ro.replies()]


def label_pairs(model, asked, seed: int, quick: bool = False) -> list[dict]:
    """Two sampled replies per problem; where the gold reward differs, the better one is "chosen".

    ``quick`` (the tests' barely trained model, whose replies all score 0):
    the right reply is chosen over the first sample, so that there are pairs.
    """
    _, replies = sample(model, asked, group_size=2, seed=seed)
    records = []
    for i, p in enumerate(asked):
        a, b = replies[2 * i], replies[2 * i + 1]
        if quick:
            a = p.messages()[-1]["content"]
        ga, gb = gold(p, a), gold(p, b)
        if ga != gb and a.strip() and b.strip():  # a preference pair needs two replies with text
            records.append(dict(prompt=p.question, chosen=a if ga > gb else b, rejected=b if ga > gb else a))
    return records


def measure(policy, reference, proxy, asked, seed: int) -> dict:
    """On held-out problems: KL(policy || reference) per reply (k1 on the policy's samples), proxy and gold reward."""
    ro, replies = sample(policy, asked, group_size=IGPT["measure_samples"], seed=seed)
    with torch.no_grad():
        ref = policy_logprobs(reference, ro)
    kl = ((ro.logps - ref) * ro.mask).sum(1)
    questions = [p.question for p in asked for _ in range(IGPT["measure_samples"])]
    owners = [p for p in asked for _ in range(IGPT["measure_samples"])]
    return dict(
        kl=float(kl.mean()),
        proxy=float(torch.tensor(proxy(prompts=questions, completions=replies)).mean()),
        gold=sum(gold(p, r) for p, r in zip(owners, replies)) / len(replies),
        exact=sum(grade(p, r) for p, r in zip(owners, replies)) / len(replies),
    )


def measured_checkpoints(run_dir: Path, reference, proxy, asked) -> list[dict]:
    rows = []
    for ckpt in list_checkpoints(run_dir):
        policy = load_chat_model(str(ckpt))[0].eval()
        rows.append(dict(step=int(ckpt.name.split("_")[-1]), **measure(policy, reference, proxy, asked, 0)))
        print(f"    step {rows[-1]['step']}: " + ", ".join(f"{k} {v:.3f}" for k, v in rows[-1].items() if k != "step"))
    return rows


def igpt(sft: Path, root: Path, q: dict) -> dict:
    """InstructGPT in miniature: gold-labelled pairs, a Bradley-Terry reward model, PPO against it, DPO beside.

    Pairs of the SFT model's own samples on train problems are labelled by
    :func:`gold` (closeness of the answer), which the models never see.  The
    reward model (from the SFT weights, as InstructGPT's) learns them; its
    held-out accuracy is recorded.  PPO with a per-token KL penalty maximises
    the reward model (the proxy); each kept checkpoint is measured on held-out
    test problems: KL to the SFT model, proxy and gold reward, the over-
    optimisation curve of Gao et al. (2022).  DPO learns from the same pairs
    and is measured on the same axes.
    """
    s = dict(IGPT, **{k: v for k, v in q.items() if k in IGPT})
    start = load_chat_model(str(list_checkpoints(sft)[-1]))[0].eval()
    pool = problems(TASK["task"], s["pair_problems"], split="train", **task_args())
    records = label_pairs(start, pool, seed=1, quick=bool(q))
    held = problems(TASK["task"], s["measure_problems"], split="test", **task_args())
    t0 = time.perf_counter()
    rm_run = finished(train_reward_model(str(sft), records, val_fraction=s["rm_val_fraction"], seed=0,
                                         progress=False, max_steps=s["rm_steps"], lr=s["rm_lr"], eval_interval=0,
                                         warmup_steps=min(10, s["rm_steps"] // 2)))  # fmt: skip
    rm = rm_run.model
    rm_seconds = time.perf_counter() - t0
    val = reward_pairs(records, ChatFormat(), rm.block_size, s["rm_val_fraction"], 0)[1]  # what training held out
    n_val = len(val)
    accuracy = pairwise_accuracy(rm, val, ChatFormat())
    print(f"  reward model: {len(records)} pairs, held-out accuracy {accuracy}", flush=True)
    proxy = as_reward(rm, ChatFormat())
    out = dict(settings=s, pairs=len(records), val_pairs=n_val, rm_accuracy=accuracy.__dict__, ppo={}, dpo={})
    out.update(rm_seconds=round(rm_seconds, 2), start=measure(start, start, proxy, held, 0))
    for kl_coef in s["kl_coefs"]:
        name = f"ppo-kl{kl_coef:g}"
        run = grpo_run(sft, root / name, 0, None, dict(q, rl_steps=s["ppo_steps"], every=s["every"]),
                       settings=dict(algo="ppo", kl_coef=kl_coef, group_size=s["ppo_group"]), reward_fn=proxy,
                       batch_size=s["ppo_batch"], lr=s["ppo_lr"])  # fmt: skip
        run["checkpoints"] = measured_checkpoints(root / name, start, proxy, held)
        out["ppo"][f"{kl_coef:g}"] = run
    for beta in s["dpo_betas"]:
        name = f"dpo-b{beta:g}"
        t0 = time.perf_counter()
        every, steps = s["every"], s["dpo_steps"]
        finished(prefer(str(sft), records, beta=beta, seed=0, max_steps=steps, lr=s["dpo_lr"],
                        checkpoint_dir=str(root / name), checkpoint_interval=every,
                        keep_checkpoints=steps // every + 1, progress=False, warmup_steps=min(10, steps // 2),
                        eval_interval=0))  # fmt: skip
        out["dpo"][f"{beta:g}"] = dict(seconds=round(time.perf_counter() - t0, 2),
                                       checkpoints=measured_checkpoints(root / name, start, proxy, held))  # fmt: skip
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="book/results/rewards_cpu.json")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"which parts to (re)record: {', '.join(PARTS)}")
    ap.add_argument("--workdir", default="", help="keep the base and SFT checkpoints here between invocations")
    ap.add_argument("--quick", action="store_true", help="a small version for the tests (minutes -> seconds)")
    args = ap.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    if set(parts) - set(PARTS):
        ap.error(f"--parts: unknown {sorted(set(parts) - set(PARTS))}; use some of {', '.join(PARTS)}")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    q = dict(QUICK) if args.quick else {}
    data = {}
    if Path(args.out).exists():
        data = json.loads(Path(args.out).read_text())["data"]
        if data.get("quick", False) != args.quick:
            data = {}  # a quick file and a full one never mix
    if "control" in parts and "grpo" not in parts and "grpo" not in data:
        ap.error("--parts control needs the grpo part (its seconds) recorded first")
    test = problems(TASK["task"], q.get("n_test", N_TEST), split="test", **task_args())
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.workdir or tmp)
        root.mkdir(parents=True, exist_ok=True)
        sft = prepare(root, q)
        runs = Path(tempfile.mkdtemp(dir=tmp))
        if "start" in parts:
            data["start"] = part_start(sft, test, q)
        if "grpo" in parts:
            data["grpo"] = part_grpo(sft, runs, test, q)
        if "control" in parts:
            data["control"] = part_control(sft, runs, test, q, data["grpo"])
        if "lab" in parts:
            data["lab"] = part_lab(sft, runs, test, q)
        if "igpt" in parts:
            data["igpt"] = igpt(sft, runs, q)
    sft_settings = SFT | {"max_steps": q.get("sft_steps", SFT["max_steps"])}
    data.update(quick=args.quick, cpu=cpu_name(), threads=torch.get_num_threads())
    data["settings"] = dict(base_steps=q.get("base_steps", BASE_STEPS), task=TASK | {"n_test": len(test)},
                            sft=sft_settings, full_lr=FULL_LR)  # fmt: skip
    data.setdefault("wall_seconds", {}).update({",".join(parts): round(time.perf_counter() - t_start, 1)})
    write_result(args.out, data, command=" ".join(["python", *sys.argv]))
    print(f"wrote {args.out}: parts {', '.join(parts)} in {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

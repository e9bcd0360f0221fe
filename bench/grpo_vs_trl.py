"""gputrain rl against TRL's GRPOTrainer on the CPU: seconds per GRPO step, the rollout's share, peak memory (issue 33).

    python bench/grpo_vs_trl.py [--rounds 5] [--steps 20] [--out book/results/grpo_vs_trl_cpu.json]
    python bench/grpo_vs_trl.py --quick --out /tmp/q.json        # a few steps, one round: the test's run

One GRPO step is a rollout and a learning step: G replies sampled to each of a batch of problems, graded
exactly, turned into group advantages, scored again with gradient, the loss, backward, one AdamW step.
What both sides get:

- the model: an untrained GPT of 2 layers x 64, 4 heads, context 64, dropout 0, biases, tied embeddings,
  exact GELU, seeded (``torch.manual_seed(0)``) and made a chat model by ``posttrain.chat_model`` (vocabulary
  260 = 256 bytes + 4 chat tokens).  gputrain's side gets it as the base of ``posttrain.reinforce``; TRL's
  side gets a transformers ``GPT2LMHeadModel`` built from a ``GPT2Config`` of the same shape holding the same
  weights (copied across; the run checks that both give the same logits) and the byte tokenizer of
  ``bench/sft_vs_trl.py`` (id = byte, the chat tokens 256-259 in gputrain's order, a chat template writing
  gputrain's format; the run checks that every prompt's ids are ``ChatFormat.encode_prompt``'s).  Nothing is
  downloaded (``HF_HUB_OFFLINE=1``).
- the task: ``problems("arithmetic", 512, split="train", digits=2, ops=("+",), seed=0)``, asked as one user
  turn; 8 problems per step, G = 8 replies each (64 rows), at most 16 new tokens, temperature 1 (no top-k or
  top-p), graded by ``posttrain.task_rewards`` (TRL: a reward function calling it on the decoded reply).
- the loss: beta 0 (no reference model), ``loss_type="dapo"``, ``scale_rewards="group"``, one optimizer
  step per rollout, on-policy (TRL: ``generation_batch_size`` = rows per step, ``num_iterations`` 1, so it
  computes no old log-probs; gputrain passes none: the ratio is 1 on both sides).
- the recipe: AdamW lr 3e-4, betas 0.9/0.95, no weight decay, warmup 5 then cosine to a tenth, gradient
  clipping at 1.0, fp32 (TRL: ``bf16=False``, ``use_cpu=True``), seed 0, one thread, no evaluation, no
  saving, no report, dropout off (TRL: ``disable_dropout=True``), no activation checkpointing.

The replies' lengths.  An untrained model says ``<|end|>`` about once in 260 tokens, so a few replies would
end early, and the two sides would not stop alike (TRL's ``generate`` runs the whole batch until its last
row ends; gputrain's rows leave the batch as they end).  So no reply ends early on either side: gputrain's
rollout is given a stop id no token has (``NEVER``), TRL's ``generate`` ``min_new_tokens`` = the maximum
(transformers then masks ``<|end|>`` until then).  Every reply is exactly 16 tokens on both sides, and the
run checks it.  Its rewards are all 0 and so are the advantages; the arithmetic of the step is the same.

Prompts differ in length ("What is 7 + 45?" against "What is 17 + 45?").  TRL pads them on the left into
one batch with an attention mask; gputrain runs each length as its own batch, unpadded (its GPT has
absolute positions and no padding mask).  That is each one's design and is left as it is.

Each run is a fresh process (``gputrain.speed.process_cost``: the peak RSS of the whole process from the
kernel), the order flipping every round (gputrain TRL, TRL gputrain, ...).  Inside, each side stamps the
end of every optimizer step and times its phases: ``generate`` (the sampling: gputrain's ``rollout``,
TRL's ``model.generate``), ``batch`` (everything from the step's start to the learner's input: prompts,
sampling, decoding, grading, advantages, padding; TRL's ``_generate_and_score_completions``),
``learner_forward`` (the scoring pass with gradient and the loss: gputrain's ``policy_logprobs`` and
``grpo_loss``, TRL's ``_compute_loss``) and the rest of the step (backward, clipping, AdamW, the
schedule, the framework's bookkeeping).  Seconds per step are the median over the steps after
``SKIP``; the table gives the median over the rounds of each run's median.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before any Hugging Face import: no network, no telemetry
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "companion" / "src"))  # this checkout's gputrain
from sft_vs_trl import byte_tokenizer, child, gpt2_state, rss_mib, versions  # noqa: E402  (this folder is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
SHAPE = {"n_layer": 2, "n_head": 4, "n_embd": 64, "block_size": 64}
RL = {"problems": 8, "group_size": 8, "max_new_tokens": 16, "temperature": 1.0, "beta": 0.0}
RL |= {"loss_type": "dapo", "scale_rewards": "group"}
TASK = {"task": "arithmetic", "n_problems": 512, "digits": 2, "ops": "+"}
RECIPE = {"lr": 3e-4, "beta1": 0.9, "beta2": 0.95, "weight_decay": 0.0, "warmup_steps": 5, "min_lr_ratio": 0.1}
RECIPE |= {"grad_clip": 1.0, "seed": 0}
SIDES = ("gputrain", "trl")
PHASES = ("generate", "batch", "learner_forward")
SKIP = 2  # optimizer steps left out of the timing (warm-up)
DEFAULT_OUT = ROOT / "book" / "results" / "grpo_vs_trl_cpu.json"


def chat_gpt():
    """The untrained chat GPT both sides start from: seeded, grown to the chat vocabulary by ``chat_model``."""
    import torch

    from gputrain.model import GPT, GPTConfig
    from gputrain.posttrain import ChatFormat, chat_model

    fmt = ChatFormat()
    torch.manual_seed(RECIPE["seed"])
    base = GPT(GPTConfig(vocab_size=fmt.text_vocab_size, dropout=0.0, **SHAPE))
    return base, chat_model(base, fmt, seed=RECIPE["seed"]), fmt


def problem_pool() -> list:
    from gputrain.posttrain import problems

    t = TASK
    return problems(t["task"], t["n_problems"], split="train", digits=t["digits"], ops=tuple(t["ops"]), seed=0)


# --- one run, in its own process ----------------------------------------------------------------


class Meter:
    """What a run records per optimizer step: the end time (wall, CPU), its phases' seconds, the replies' tokens."""

    def __init__(self, steps: int):
        self.steps, self.stamps, self.losses, self.reply_tokens = steps, [], [], []
        self.phases = {p: [0.0] * steps for p in PHASES}
        self.rss_start, self.rss_train_peak = rss_mib("VmRSS"), float("nan")  # after the imports, before the model

    def add(self, phase: str, seconds: float) -> None:
        if len(self.stamps) < self.steps:
            self.phases[phase][len(self.stamps)] += seconds

    def step_done(self) -> None:
        self.stamps.append((time.perf_counter(), time.process_time()))
        if len(self.stamps) == self.steps:  # the peak of the training itself, before the exit
            self.rss_train_peak = rss_mib("VmHWM")

    def record(self, model, optimizer) -> dict:
        inner = getattr(optimizer, "optimizer", optimizer)  # under Accelerate's wrapper
        flags = {k: inner.defaults.get(k) for k in ("fused", "foreach")}
        dtypes = sorted({str(p.dtype) for p in model.parameters()})
        return {
            "stamps": self.stamps, "phases": self.phases, "losses": self.losses, "reply_tokens": self.reply_tokens,
            "optimizer": f"{type(inner).__module__}.{type(inner).__name__} {flags}", "dtypes": dtypes,
            "parameters": sum(p.numel() for p in model.parameters()), "rss_start_mib": self.rss_start,
            "rss_train_peak_mib": self.rss_train_peak,
        }  # fmt: skip


def timed(meter: Meter, phase: str, fn):
    """``fn`` with its seconds added to ``phase`` of the current step."""

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            meter.add(phase, time.perf_counter() - start)

    return wrapper


def run_gputrain(spec: dict) -> dict:
    """``posttrain.reinforce`` (what ``gputrain rl`` runs) from the untrained chat GPT, every step stamped and timed."""
    import gputrain.posttrain.rl as rl
    import gputrain.train.loop as loop

    meter, step, used = Meter(spec["steps"]), loop.train_step, []
    base, _, fmt = chat_gpt()
    never = fmt.vocab_size  # a stop id no token has: every reply runs to max_new_tokens (the module's docstring)

    def stamped(model, micro, optimizer, *args, **kwargs):
        used[:] = [optimizer]
        out = step(model, micro, optimizer, *args, **kwargs)
        meter.losses.append(out.loss)
        meter.step_done()
        return out

    def sampled(*args, stop, **kwargs):
        ro = timed(meter, "generate", rollout)(*args, stop=never, **kwargs)
        meter.reply_tokens.append(ro.lengths.tolist())
        return ro

    def scored(*args, **kwargs):  # the learner's pass: the batch was ready when it began
        meter.add("batch", time.perf_counter() - began[0])
        return timed(meter, "learner_forward", score)(*args, **kwargs)

    def forward(self, *args, **kwargs):
        began[:] = [time.perf_counter()]
        return grpo_forward(self, *args, **kwargs)

    rollout, score, grpo_forward, began = rl.rollout, rl.policy_logprobs, rl.GRPOModel.forward, [0.0]
    rl.rollout, rl.policy_logprobs, rl.GRPOModel.forward = sampled, scored, forward
    rl.grpo_loss = timed(meter, "learner_forward", rl.grpo_loss)
    loop.train_step = stamped
    r, t = spec["recipe"], TASK
    settings = rl.GRPOSettings(
        task=t["task"], n_problems=t["n_problems"], digits=t["digits"], ops=t["ops"], group_size=RL["group_size"],
        loss_type=RL["loss_type"], scale_rewards=RL["scale_rewards"], beta=RL["beta"],
        temperature=RL["temperature"], max_new_tokens=RL["max_new_tokens"],
    )  # fmt: skip
    result = rl.reinforce(
        base, settings=settings, max_steps=spec["steps"], batch_size=RL["problems"], lr=r["lr"], beta1=r["beta1"],
        beta2=r["beta2"], weight_decay=r["weight_decay"], warmup_steps=r["warmup_steps"], schedule="cosine",
        min_lr_ratio=r["min_lr_ratio"], grad_clip=r["grad_clip"], seed=r["seed"], progress=False,
    )  # fmt: skip
    return meter.record(result.model.policy, used[0])


def trl_model():
    """The untrained chat GPT as a GPT2LMHeadModel with the same weights; returns it and the max |logit diff|."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    _, ours, fmt = chat_gpt()
    c, end = ours.cfg, fmt.end_id
    config = GPT2Config(
        vocab_size=c.vocab_size, n_positions=c.block_size, n_embd=c.n_embd, n_layer=c.n_layer, n_head=c.n_head,
        activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5,
        tie_word_embeddings=True, bos_token_id=end, eos_token_id=end, pad_token_id=end,
    )  # fmt: skip
    theirs = GPT2LMHeadModel(config)
    theirs.load_state_dict(gpt2_state(ours.state_dict(), c.n_layer), strict=False)
    idx = torch.randint(0, c.vocab_size, (2, c.block_size), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        diff = (ours.eval()(idx)[0] - theirs.eval()(idx).logits).abs().max().item()
    return theirs.train(), diff


def run_trl(spec: dict) -> dict:
    """TRL's GRPOTrainer on the same model, task and recipe, every step stamped and timed."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from gputrain.posttrain import ChatFormat, task_rewards

    meter, pool, fmt, tok = Meter(spec["steps"]), problem_pool(), ChatFormat(), byte_tokenizer()
    model, diff = trl_model()
    ids = tok.apply_chat_template([p.prompt() for p in pool], add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    same_prompts = all(list(a) == fmt.encode_prompt(p.prompt()) for a, p in zip(ids, pool))

    def exact(prompts, completions, index, **kwargs):  # the same grader, on TRL's decoded replies
        return task_rewards([pool[i] for i in index], [c[0]["content"] for c in completions]).tolist()

    class Stamp(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):  # after the optimizer step and zero_grad
            meter.step_done()

    class Timed(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            out = timed(meter, "batch", super()._generate_and_score_completions)(inputs)
            meter.reply_tokens.append(out["completion_mask"].sum(1).tolist())
            return out

        def _compute_loss(self, model, inputs):
            loss = timed(meter, "learner_forward", super()._compute_loss)(model, inputs)
            meter.losses.append(float(loss))
            return loss

    model.generate = timed(meter, "generate", model.generate)  # the unwrapped model TRL generates with
    r, rows, L = spec["recipe"], RL["problems"] * RL["group_size"], RL["max_new_tokens"]
    args = GRPOConfig(
        output_dir=spec["ckpt"], max_steps=spec["steps"], per_device_train_batch_size=rows,
        generation_batch_size=rows, num_generations=RL["group_size"], num_iterations=1,
        max_completion_length=L, generation_kwargs={"min_new_tokens": L}, temperature=RL["temperature"],
        top_p=1.0, top_k=0, beta=RL["beta"], loss_type=RL["loss_type"], scale_rewards=RL["scale_rewards"],
        learning_rate=r["lr"], adam_beta1=r["beta1"], adam_beta2=r["beta2"], weight_decay=r["weight_decay"],
        warmup_steps=r["warmup_steps"], lr_scheduler_type="cosine_with_min_lr",
        lr_scheduler_kwargs={"min_lr_rate": r["min_lr_ratio"]}, max_grad_norm=r["grad_clip"], seed=r["seed"],
        data_seed=r["seed"], bf16=False, use_cpu=True, gradient_checkpointing=False, disable_dropout=True,
        save_strategy="no", report_to="none", disable_tqdm=True, dataloader_pin_memory=False,
    )  # fmt: skip
    rows_data = [{"prompt": p.prompt(), "index": i} for i, p in enumerate(pool)]
    trainer = Timed(
        model=model, reward_funcs=exact, args=args, train_dataset=Dataset.from_list(rows_data),
        processing_class=tok, callbacks=[Stamp()],
    )  # fmt: skip
    trainer.train()
    return meter.record(trainer.model, trainer.optimizer) | {"logit_diff": diff, "same_prompt_ids": same_prompts}


# --- the comparison -----------------------------------------------------------------------------


def one_run(side: str, steps: int, work: Path, n: int) -> dict:
    """Run one side in a fresh process; its measurements, with the kernel's peak RSS of the whole process."""
    from gputrain.speed import process_cost

    folder = work / f"{side}-{n}"
    folder.mkdir()
    spec = {"steps": steps, "recipe": RECIPE, "ckpt": str(folder / "ckpt"), "result": str(folder / "result.json")}
    (folder / "spec.json").write_text(json.dumps(spec))
    try:
        cost = process_cost([sys.executable, str(Path(__file__).resolve()), "--child", side, str(folder / "spec.json")])
    except RuntimeError as exc:
        sys.exit(f"grpo_vs_trl: the {side} run failed: {exc}")
    got = json.loads((folder / "result.json").read_text())
    stamps, phases = got.pop("stamps"), got.pop("phases")
    if len(stamps) != steps or len(got["reply_tokens"]) != steps:
        sys.exit(f"grpo_vs_trl: the {side} run stamped {len(stamps)} steps and {len(got['reply_tokens'])} rollouts "
                 f"of {steps}; its loop changed")  # fmt: skip
    walls = [b[0] - a[0] for a, b in zip(stamps[SKIP - 1 :], stamps[SKIP:])]  # steps SKIP+1 ... steps
    cpus = [b[1] - a[1] for a, b in zip(stamps[SKIP - 1 :], stamps[SKIP:])]
    got |= {"step_s": statistics.median(walls), "step_cpu_s": statistics.median(cpus), "timed_steps": len(walls)}
    got |= {"step_walls": walls}
    for p in PHASES:
        got[f"{p}_s"] = statistics.median(phases[p][SKIP:])
        got[f"{p}_share"] = statistics.median(t / w for t, w in zip(phases[p][SKIP:], walls))
    got["rest_s"] = statistics.median(w - b - f for w, b, f in zip(walls, phases["batch"][SKIP:],
                                                                   phases["learner_forward"][SKIP:]))  # fmt: skip
    got["rollout_share"] = got["generate_share"]
    got["rss_mib"] = cost["rss_mib"]
    return got | {"wall_s": cost["wall_s"], "cpu_s": cost["cpu_s"], "load1": os.getloadavg()[0]}


SUMMED = ("step_s", "step_cpu_s", "generate_s", "batch_s", "learner_forward_s", "rest_s", "rollout_share")
SUMMED += ("batch_share", "learner_forward_share", "rss_mib", "rss_start_mib", "rss_train_peak_mib", "wall_s")


def spread(values: list) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(runs: dict) -> dict:
    """Medians (and min, max) per side over the rounds, and gputrain / TRL ratios of the medians."""
    table = {}
    for side in SIDES:
        rs = runs[side]
        table[side] = {k: spread([r[k] for r in rs]) for k in SUMMED}
        table[side] |= {"parameters": rs[0]["parameters"], "optimizer": rs[0]["optimizer"]}
    g, t = table["gputrain"], table["trl"]
    table["ratio"] = {k: g[k]["median"] / t[k]["median"] for k in ("step_s", "step_cpu_s", "generate_s", "rss_mib")}
    return table


def print_table(table: dict, rounds: int) -> None:
    print(f"\nmedians of {rounds} alternated runs each, one thread; seconds per GRPO step after {SKIP} warm-up steps")
    head = ("s/step", "CPU s", "generate", "batch", "learner", "rest", "rollout%", "peak MiB", "at start")
    print(f"{'side':9}" + "".join(f"{h:>10}" for h in head))
    for side in SIDES:
        s = table[side]
        cells = [s[k]["median"] for k in ("step_s", "step_cpu_s", "generate_s", "batch_s", "learner_forward_s")]
        cells += [s["rest_s"]["median"], 100 * s["rollout_share"]["median"]]
        cells += [s[k]["median"] for k in ("rss_mib", "rss_start_mib")]
        print(f"{side:9}" + "".join(f"{c:10.3f}" if i < 6 else f"{c:10.1f}" for i, c in enumerate(cells)))
    r = table["ratio"]
    print(
        f"gputrain/TRL: seconds per step x{r['step_s']:.2f} (CPU x{r['step_cpu_s']:.2f}), "
        f"generate x{r['generate_s']:.2f}, peak RSS x{r['rss_mib']:.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternated runs of each side (default 5)")
    parser.add_argument("--steps", type=int, default=20, help=f"GRPO steps per run, the first {SKIP} untimed (20)")
    parser.add_argument("--quick", action="store_true", help="5 steps, 1 round: the test's run")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the JSON written (default {DEFAULT_OUT})")
    parser.add_argument("--child", nargs=2, metavar=("SIDE", "SPEC"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(*args.child, runners={"gputrain": run_gputrain, "trl": run_trl})
    if args.quick:
        args.rounds, args.steps = 1, 5
    if args.rounds < 1 or args.steps < SKIP + 3:
        parser.error(f"need --rounds >= 1 and --steps >= {SKIP + 3}; got {args.rounds} and {args.steps}")
    try:
        import trl  # noqa: F401
    except ImportError:
        parser.error("TRL is not installed; run .venv/bin/pip install 'trl>=1.16' (make setup installs it)")
    import torch

    torch.set_num_threads(1)
    runs = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory(prefix="grpo_vs_trl-") as tmp:
        for i in range(args.rounds):
            for side in SIDES if i % 2 == 0 else SIDES[::-1]:
                r = one_run(side, args.steps, Path(tmp), i)
                runs[side].append(r)
                print(
                    f"round {i + 1} {side:8} {r['step_s']:7.3f} s/step, generate {100 * r['rollout_share']:4.1f}%, "
                    f"{r['rss_mib']:6.0f} MiB peak, load {r['load1']:.2f}",
                    flush=True,
                )
    table = summarize(runs)
    print_table(table, args.rounds)
    record(args, runs, table)
    return 0


def record(args, runs: dict, table: dict) -> None:
    """Write the table, every run and the provenance to ``--out``."""
    from gputrain.device import cpu_name
    from gputrain.results import write_result

    data = {
        "table": table, "runs": runs, "steps": args.steps, "rounds": args.rounds, "skipped_steps": SKIP,
        "shape": SHAPE, "vocab_size": 260, "model": "untrained, torch.manual_seed(0), chat_model(); GPT-2 twin for TRL",
        "rl": RL, "task": TASK, "recipe": RECIPE,
        "reply_lengths": "every reply max_new_tokens on both sides: gputrain's stop id is one no token has, "
        "TRL's generate has min_new_tokens = max_completion_length",
        "prompt_batching": "TRL: one batch, left-padded with an attention mask; gputrain: one batch per prompt length",
        "rollout_share": "generate seconds / step seconds (gputrain: posttrain.rollout; TRL: model.generate)",
        "phases": {"generate": "the sampling (gputrain: posttrain.rollout; TRL: model.generate)",
                   "batch": "from the step's start to the learner's input: generate, decoding, grading, advantages, "
                   "padding (TRL: _generate_and_score_completions)",
                   "learner_forward": "the scoring pass with gradient and the loss (gputrain: policy_logprobs and "
                   "grpo_loss; TRL: _compute_loss)",
                   "rest": "step - batch - learner_forward: backward, clipping, AdamW, the schedule, the loop"},
        "cpu": cpu_name(), "cores": os.cpu_count(), "threads": 1, "versions": versions(),
    }  # fmt: skip
    write_result(args.out, data, command=shlex.join(["python", "bench/grpo_vs_trl.py", *sys.argv[1:]]))


if __name__ == "__main__":
    sys.exit(main())

"""gputrain sft against TRL's SFTTrainer on the CPU: tokens/s and peak memory, runs alternated (issue 32).

    python bench/sft_vs_trl.py [--repeats 6] [--steps 100] [--out book/results/sft_vs_trl_cpu.json]
    python bench/sft_vs_trl.py --quick --out /tmp/q.json        # a few steps, one repeat: the test's run

What both sides get (prepared once, in a temporary folder):

- data: ``problems("arithmetic", n, split="train", digits=3, ops=("+", "-", "*"))`` as chat turns
  (``Problem.messages()``: one user turn, one assistant turn), one JSONL line each, n = batch x steps,
  so a run is exactly one pass over the data;
- the base: a short ``gputrain train`` run (stdlib text, 40 steps) of a GPT of 4 layers x 128, 4 heads,
  context 64, dropout 0, biases, tied embeddings, exact GELU: a pretrained model, not a random one.
  gputrain fine-tunes that checkpoint.  TRL gets a transformers ``GPT2LMHeadModel`` built from a
  ``GPT2Config`` of the same shape (``activation_function="gelu"``, every dropout 0, vocabulary 260 =
  256 bytes + 4 chat tokens) holding the same weights (the checkpoint's GPT grown to 260 tokens by
  ``posttrain.grow_vocab`` and copied across; the preparation checks that both models give the same
  logits), saved with a byte-level tokenizer built with ``tokenizers`` (id = byte value, the four chat
  tokens after 255 in gputrain's order) and a chat template that writes gputrain's chat format
  (``<|user|>...<|end|><|assistant|>...<|end|>``) with ``{% generation %}`` around the reply: the
  token ids are the same on both sides.  Nothing is downloaded (``HF_HUB_OFFLINE=1``).
- the recipe: batch 16, the same steps, AdamW (lr 1e-3, LoRA 3e-3, betas 0.9/0.95, no weight decay), warmup 5
  then cosine to a tenth, gradient clipping at 1.0, fp32, seed 0, one thread, no evaluation, loss on the
  assistant's tokens only (TRL: ``assistant_only_loss=True``); LoRA rows: rank 8, alpha 16, dropout 0,
  on the attention and MLP linears (gputrain's ``DEFAULT_TARGETS``; PEFT: ``c_attn``, ``c_proj``,
  ``c_fc``).  TRL's defaults that would change the work are set to gputrain's: ``bf16=False``,
  ``activation_checkpointing=False`` (TRL's SFT turns it on; gputrain recomputes nothing by default), no
  saving, no report.  Each keeps its own AdamW implementation (TRL's default ``adamw_torch_fused``;
  gputrain's unfused ``torch.optim.AdamW`` on a CPU): the JSON records which ran.

Sequence handling: TRL's collator pads each batch on the right to its longest conversation and passes an
attention mask; gputrain pads as its SFT data does (the JSON records how: see ``gputrain_padding``).
Neither packs.  The tokens counted, on both sides alike, are the conversations' tokens (N per
conversation of N ids: TRL's non-pad inputs; gputrain trains on the N - 1 inputs that have a next
token), pad tokens never.

Each run is a fresh process (``gputrain.speed.process_cost``: peak RSS from the kernel, ``wait4``),
the order flipping every repeat (gputrain TRL, TRL gputrain, ...).  Inside, each side stamps the end of
every optimizer step; throughput is the tokens of steps ``warmup+1 ... steps`` over the time between
the end of step ``warmup`` and the end of the last (imports, model loading and the first steps left
out, alike).  The table gives the medians over the repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before any Hugging Face import: no network, no telemetry
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
SHAPE = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 64}
RECIPE = {"batch_size": 16, "beta1": 0.9, "beta2": 0.95, "weight_decay": 0.0, "warmup_steps": 5}
RECIPE |= {"min_lr_ratio": 0.1, "grad_clip": 1.0, "seed": 0}
MODES = {"full": 0, "lora": 8}  # LoRA rank per row (0: full fine-tuning)
LR = {"full": 1e-3, "lora": 3e-3}  # gputrain sft's defaults (LoRA's adapters start at zero: a larger step)
LORA_ALPHA = 16.0
PEFT_TARGETS = ("c_attn", "c_proj", "c_fc")  # GPT-2's names for gputrain's attn.qkv, attn.proj, mlp.fc, mlp.proj
SIDES = ("gputrain", "trl")
SPECIAL = ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>")
TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'assistant' %}"
    "<|assistant|>{% generation %}{{ m['content'] }}<|end|>{% endgeneration %}"
    "{% else %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
TASK = {"seed": 0, "digits": 3, "ops": ("+", "-", "*")}  # problems("arithmetic", n, split="train", **TASK)
VAL_FRACTION = 1e-6  # gputrain's smallest hold-out: one example (never evaluated: eval_interval 0)
BASE_STEPS, SKIP = 40, 5  # steps of the base's pretraining; optimizer steps left out of the timing
DEFAULT_OUT = ROOT / "book" / "results" / "sft_vs_trl_cpu.json"


# --- what both sides get ------------------------------------------------------------------------


def write_data(work: Path, n: int) -> dict:
    """n + 1 arithmetic chat turns for gputrain, the n it trains on for TRL, as JSONL; the paths and token counts.

    ``gputrain sft`` holds out at least one example for validation (its ``val_fraction`` must be > 0;
    with ``eval_interval`` 0 it never evaluates it); TRL's file leaves out that one, found by
    gputrain's own seeded split, so both train on the same n conversations, one pass each.
    """
    from gputrain.posttrain import ChatFormat, problems, split_examples

    fmt = ChatFormat()
    records = [{"messages": p.messages()} for p in problems("arithmetic", n + 1, split="train", **TASK)]
    kept = sorted(split_examples(list(range(n + 1)), VAL_FRACTION, RECIPE["seed"])[0])
    paths = {"gputrain": work / "gputrain.jsonl", "trl": work / "trl.jsonl"}
    paths["gputrain"].write_text("".join(json.dumps(r) + "\n" for r in records))
    paths["trl"].write_text("".join(json.dumps(records[i]) + "\n" for i in kept))
    lengths = [len(fmt.encode(r["messages"]).ids) for r in records]
    return {"data": {k: str(v) for k, v in paths.items()}, "lengths": [lengths[i] for i in kept],
            "gputrain_length": max(lengths) - 1}  # fmt: skip


def pretrain_base(folder: Path, steps: int) -> Path:
    """A short gputrain train run: the pretrained base both sides fine-tune; returns its checkpoint."""
    from gputrain.train import TrainConfig, train

    cfg = TrainConfig(
        **SHAPE, max_steps=steps, warmup_steps=min(20, steps // 2), batch_size=16, corpus_bytes=200_000,
        eval_interval=0, checkpoint_dir=str(folder), progress=False, cache_dir="none",
    )  # fmt: skip
    return train(cfg).checkpoint


def byte_tokenizer():
    """A transformers tokenizer with gputrain's ids: byte b is id b, the chat tokens 256-259; its chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    tok = Tokenizer(models.BPE(vocab={ch: b for b, ch in bytes_to_unicode().items()}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(SPECIAL))  # ids 256, 257, 258, 259 in this order
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|end|>", eos_token="<|end|>")
    fast.chat_template = TEMPLATE
    return fast


def hf_model(checkpoint: Path, folder: Path, vocab_size: int) -> float:
    """The base as a GPT2LMHeadModel with the same weights, saved with the tokenizer; returns max |logit diff|."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from gputrain.posttrain import grow_vocab
    from gputrain.train import load_model

    ours = grow_vocab(load_model(checkpoint)[0], vocab_size).eval()
    c = ours.cfg
    config = GPT2Config(
        vocab_size=vocab_size, n_positions=c.block_size, n_embd=c.n_embd, n_layer=c.n_layer, n_head=c.n_head,
        activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5,
        tie_word_embeddings=True, bos_token_id=259, eos_token_id=259, pad_token_id=259,
    )  # fmt: skip
    theirs = GPT2LMHeadModel(config).eval()
    theirs.load_state_dict(gpt2_state(ours.state_dict(), c.n_layer), strict=False)
    idx = torch.randint(0, vocab_size, (2, c.block_size))
    with torch.no_grad():
        diff = (ours(idx)[0] - theirs(idx).logits).abs().max().item()
    theirs.save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return diff


def gpt2_state(sd: dict, n_layer: int) -> dict:
    """gputrain GPT weights under GPT-2's names (GPT-2's Conv1D stores (in, out): the matrices are transposed)."""
    out = {f"transformer.{k}.weight": sd[f"{k}.weight"] for k in ("wte", "wpe")}
    out |= {f"transformer.ln_f.{p}": sd[f"ln_f.{p}"] for p in ("weight", "bias")}
    out["lm_head.weight"] = sd["wte.weight"]
    names = {"ln1": "ln_1", "ln2": "ln_2", "attn.qkv": "attn.c_attn", "attn.proj": "attn.c_proj"}
    names |= {"mlp.fc": "mlp.c_fc", "mlp.proj": "mlp.c_proj"}
    for i in range(n_layer):
        for ours, theirs in names.items():
            w = sd[f"blocks.{i}.{ours}.weight"]
            out[f"transformer.h.{i}.{theirs}.weight"] = w if ours.startswith("ln") else w.t().contiguous()
            out[f"transformer.h.{i}.{theirs}.bias"] = sd[f"blocks.{i}.{ours}.bias"]
    return out


# --- one run, in its own process ----------------------------------------------------------------


def rss_mib(field: str) -> float:
    """VmRSS (now) or VmHWM (the peak so far) of this process, in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Meter:
    """What a run records per optimizer step: the batch's tokens and positions, the end time (wall and CPU)."""

    def __init__(self, steps: int):
        self.steps, self.stamps, self.tokens, self.positions, self.losses = steps, [], [], [], []
        self.rss_start, self.rss_train_peak = rss_mib("VmRSS"), float("nan")  # after the imports, before the model

    def batch(self, tokens: int, positions: int) -> None:
        self.tokens.append(tokens)
        self.positions.append(positions)

    def step_done(self) -> None:
        self.stamps.append((time.perf_counter(), time.process_time()))
        if len(self.stamps) == self.steps:  # the peak of the training itself, before any saving or exit
            self.rss_train_peak = rss_mib("VmHWM")

    def record(self, model, optimizer) -> dict:
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        inner = getattr(optimizer, "optimizer", optimizer)  # under Accelerate's wrapper
        flags = {k: inner.defaults.get(k) for k in ("fused", "foreach")}
        out = {"stamps": self.stamps, "tokens": self.tokens, "positions": self.positions, "losses": self.losses}
        return out | {
            "optimizer": f"{type(inner).__module__}.{type(inner).__name__} {flags}",
            "trainable": trainable,
            "rss_start_mib": self.rss_start,
            "rss_train_peak_mib": self.rss_train_peak,
        }


def run_gputrain(spec: dict) -> dict:
    """gputrain's fine-tuning (``gputrain.posttrain.finetune``, what ``gputrain sft`` runs), every step stamped."""
    import gputrain.train.loop as loop
    from gputrain.posttrain import IGNORE, finetune

    meter, inner, used = Meter(spec["steps"]), loop.train_step, []

    def stamped(model, micro, optimizer, *args, **kwargs):  # the loop's step: the batch in, the update done
        meter.batch(sum(int(conversation_lengths(y, IGNORE).sum()) for _, y in micro), sum(x.numel() for x, _ in micro))
        used[:] = [optimizer]
        out = inner(model, micro, optimizer, *args, **kwargs)
        meter.step_done()
        return out

    loop.train_step = stamped
    r = spec["recipe"]
    result = finetune(
        spec["base"], spec["data"], lora_rank=spec["rank"], lora_alpha=spec["alpha"], checkpoint_dir=spec["ckpt"],
        max_steps=spec["steps"], batch_size=r["batch_size"], lr=r["lr"], beta1=r["beta1"], beta2=r["beta2"],
        weight_decay=r["weight_decay"], warmup_steps=r["warmup_steps"], schedule="cosine",
        min_lr_ratio=r["min_lr_ratio"], grad_clip=r["grad_clip"], seed=r["seed"], val_fraction=VAL_FRACTION,
        eval_interval=0, progress=False,
    )  # fmt: skip
    meter.losses = list(result.losses)
    return meter.record(result.model, used[0])


def conversation_lengths(y, ignore: int):
    """Each row's conversation length N from its targets: the last counted target (the final <|end|>) is at N - 2."""
    import torch

    counted = y != ignore  # (B, T)
    last = torch.where(counted, torch.arange(y.shape[1]), -1).amax(1)  # (B,)
    return last + 2


def run_trl(spec: dict) -> dict:
    """TRL's SFTTrainer (PEFT LoRA for the LoRA rows) on the same data and weights, every step stamped."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    meter = Meter(spec["steps"])

    class Stamp(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):  # after the optimizer step and zero_grad
            meter.step_done()

    class Counted(SFTTrainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            meter.batch(int(inputs["attention_mask"].sum()), inputs["input_ids"].numel())
            loss = super().training_step(model, inputs, num_items_in_batch)
            meter.losses.append(float(loss))
            return loss

    r = spec["recipe"]
    rows = [json.loads(line) for line in Path(spec["data"]).read_text().splitlines()]
    model = AutoModelForCausalLM.from_pretrained(spec["hf"])
    args = SFTConfig(
        output_dir=spec["ckpt"], max_steps=spec["steps"], per_device_train_batch_size=r["batch_size"],
        learning_rate=r["lr"], adam_beta1=r["beta1"], adam_beta2=r["beta2"], weight_decay=r["weight_decay"],
        warmup_steps=r["warmup_steps"], lr_scheduler_type="cosine_with_min_lr",
        lr_scheduler_kwargs={"min_lr_rate": r["min_lr_ratio"]}, max_grad_norm=r["grad_clip"], seed=r["seed"],
        data_seed=r["seed"], bf16=False, activation_checkpointing=False, assistant_only_loss=True,
        max_length=SHAPE["block_size"] + 1, save_strategy="no", report_to="none", disable_tqdm=True,
        dataloader_pin_memory=False,
    )  # fmt: skip
    peft_config = None
    if spec["rank"]:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=spec["rank"], lora_alpha=spec["alpha"], lora_dropout=0.0, target_modules=list(PEFT_TARGETS),
            fan_in_fan_out=True, bias="none", task_type="CAUSAL_LM",
        )  # fmt: skip
    trainer = Counted(
        model=model, args=args, train_dataset=Dataset.from_list(rows),
        processing_class=AutoTokenizer.from_pretrained(spec["hf"]), peft_config=peft_config, callbacks=[Stamp()],
    )  # fmt: skip
    trainer.train()
    return meter.record(trainer.model, trainer.optimizer)


def child(side: str, spec_path: str, runners: dict | None = None) -> int:
    """One measured run: train, then write the stamps, tokens, losses and memory beside the spec.

    ``runners``: each side's run function (default: this file's; bench/grpo_vs_trl.py passes its own).
    """
    import torch

    torch.set_num_threads(1)
    spec = json.loads(Path(spec_path).read_text())
    out = (runners or {"gputrain": run_gputrain, "trl": run_trl})[side](spec)
    out |= {"rss_peak_mib": rss_mib("VmHWM"), "threads": torch.get_num_threads()}
    Path(spec["result"]).write_text(json.dumps(out))
    return 0


# --- the comparison -----------------------------------------------------------------------------


def prepare(work: Path, steps: int, base_steps: int) -> dict:
    """The data, the base checkpoint and its transformers twin, in ``work``; what every run's spec shares."""
    shared = write_data(work, RECIPE["batch_size"] * steps)
    base = pretrain_base(work / "base", base_steps)
    diff = hf_model(base, work / "hf", vocab_size=256 + len(SPECIAL))
    if diff > 1e-4:
        sys.exit(f"sft_vs_trl: the GPT-2 twin's logits differ from the base's by {diff:.3g}; the weights did not map")
    return shared | {"base": str(base), "hf": str(work / "hf"), "logit_diff": diff}


def one_run(side: str, mode: str, steps: int, shared: dict, work: Path, n: int) -> dict:
    """Run one side in a fresh process; its measurements, with the kernel's peak RSS of the whole process."""
    from gputrain.speed import process_cost

    folder = work / f"{side}-{mode}-{n}"
    folder.mkdir()
    spec = {"rank": MODES[mode], "alpha": LORA_ALPHA, "steps": steps, "ckpt": str(folder / "ckpt")}
    spec["recipe"] = shared["recipe"] | {"lr": LR[mode]}
    spec |= {k: shared[k] for k in ("base", "hf")} | {"data": shared["data"][side]}
    spec |= {"result": str(folder / "result.json")}
    (folder / "spec.json").write_text(json.dumps(spec))
    try:
        cost = process_cost([sys.executable, str(Path(__file__).resolve()), "--child", side, str(folder / "spec.json")])
    except RuntimeError as exc:
        sys.exit(f"sft_vs_trl: the {side} {mode} run failed: {exc}")
    got = json.loads((folder / "result.json").read_text())
    stamps, tokens, positions = got.pop("stamps"), got.pop("tokens"), got.pop("positions")
    if len(stamps) != steps or len(tokens) != steps:
        sys.exit(f"sft_vs_trl: the {side} {mode} run stamped {len(stamps)} steps of {steps}; its loop changed")
    wall, cpu = (stamps[-1][i] - stamps[SKIP - 1][i] for i in (0, 1))  # from the end of step SKIP to the last
    counted, timed = sum(tokens[SKIP:]), steps - SKIP
    got |= {"tokens_per_s": counted / wall, "tokens_per_cpu_s": counted / cpu, "step_ms": 1000 * wall / timed}
    got |= {"step_cpu_ms": 1000 * cpu / timed, "timed_steps": timed, "timed_tokens": counted, "tokens": sum(tokens)}
    got["rss_mib"] = cost["rss_mib"]
    got["positions_per_token"] = sum(positions) / sum(tokens)  # input positions the model ran per counted token
    return got | {"wall_s": cost["wall_s"], "cpu_s": cost["cpu_s"], "load1": os.getloadavg()[0]}


def summarize(runs: dict) -> dict:
    """Medians (and min, max) per side and mode, and gputrain / TRL ratios of the medians."""
    table = {}
    for mode in MODES:
        row = {}
        for side in SIDES:
            rs = runs[mode][side]
            row[side] = {
                k: {"median": statistics.median(r[k] for r in rs), "min": min(r[k] for r in rs),
                    "max": max(r[k] for r in rs)}
                for k in ("tokens_per_s", "tokens_per_cpu_s", "step_ms", "step_cpu_ms", "rss_mib", "rss_start_mib",
                          "rss_train_peak_mib", "rss_peak_mib", "wall_s", "positions_per_token")
            }  # fmt: skip
            row[side] |= {"trainable": rs[0]["trainable"], "optimizer": rs[0]["optimizer"]}
        g, t = row["gputrain"], row["trl"]
        row["ratio"] = {k: g[k]["median"] / t[k]["median"] for k in ("tokens_per_s", "tokens_per_cpu_s", "rss_mib")}
        table[mode] = row
    return table


def print_table(table: dict, repeats: int) -> None:
    print(f"\nmedians of {repeats} alternated runs each, one thread; tokens of the timed steps per wall / CPU second")
    head = ("tokens/s", "/CPU s", "ms/step", "peak MiB", "training", "at start", "run s", "trainable")
    print(f"{'mode':5} {'side':9}" + "".join(f"{h:>10}" for h in head))
    for mode, row in table.items():
        for side in SIDES:
            s = row[side]
            cells = [s[k]["median"] for k in ("tokens_per_s", "tokens_per_cpu_s", "step_ms", "rss_mib")]
            cells += [s[k]["median"] for k in ("rss_train_peak_mib", "rss_start_mib", "wall_s")]
            print(f"{mode:5} {side:9}" + "".join(f"{c:10.1f}" for c in cells) + f"{s['trainable']:10,}")
        r = row["ratio"]
        print(
            f"{mode:5} gputrain/TRL: tokens/s x{r['tokens_per_s']:.2f} (per CPU second x{r['tokens_per_cpu_s']:.2f}), "
            f"peak RSS x{r['rss_mib']:.2f}"
        )


def versions() -> dict:
    from importlib.metadata import version

    out = {name: version(name) for name in ("torch", "transformers", "trl", "peft", "accelerate", "datasets")}
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain"], capture_output=True, text=True)
    return out | {"git_commit": commit.stdout.strip() or None, "git_dirty": bool(dirty.stdout.strip())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=6, help="alternated runs of each side per mode (default 6)")
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps per run (default 100)")
    parser.add_argument(
        "--base-steps", type=int, default=BASE_STEPS, help=f"the base's pretraining steps ({BASE_STEPS})"
    )
    parser.add_argument("--quick", action="store_true", help="8 steps (warmup 2), 1 repeat, a 10-step base")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the JSON written (default {DEFAULT_OUT})")
    parser.add_argument("--child", nargs=2, metavar=("SIDE", "SPEC"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(*args.child)
    if args.quick:
        args.repeats, args.steps, args.base_steps = 1, 8, 10
    if args.repeats < 1 or args.steps < SKIP + 2:
        parser.error(f"need --repeats >= 1 and --steps >= {SKIP + 2}; got {args.repeats} and {args.steps}")
    try:
        import trl  # noqa: F401
    except ImportError:
        parser.error("TRL is not installed; run .venv/bin/pip install 'trl>=1.16' (make setup installs it)")
    import torch

    torch.set_num_threads(1)
    runs = {mode: {side: [] for side in SIDES} for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="sft_vs_trl-") as tmp:
        work = Path(tmp)
        shared = prepare(work, args.steps, args.base_steps)
        shared["recipe"] = RECIPE | ({"warmup_steps": 2} if args.quick else {})  # --quick: learn within 8 steps
        for i in range(args.repeats):
            for mode in MODES:
                for side in SIDES if i % 2 == 0 else SIDES[::-1]:
                    r = one_run(side, mode, args.steps, shared, work, i)
                    runs[mode][side].append(r)
                    print(
                        f"repeat {i + 1} {mode:4} {side:8} {r['tokens_per_s']:8.0f} tokens/s {r['step_ms']:6.1f} "
                        f"ms/step {r['rss_mib']:6.0f} MiB peak, loss {r['losses'][0]:.3f} -> {r['losses'][-1]:.3f}",
                        flush=True,
                    )
    table = summarize(runs)
    print_table(table, args.repeats)
    record(args, shared, runs, table)
    return 0


def record(args, shared: dict, runs: dict, table: dict) -> None:
    """Write the table, every run and the provenance to ``--out``."""
    from gputrain.device import cpu_name
    from gputrain.results import write_result

    lengths = shared["lengths"]
    data = {
        "table": table, "runs": runs, "steps": args.steps, "repeats": args.repeats, "skipped_steps": SKIP,
        "shape": SHAPE, "vocab_size": 256 + len(SPECIAL), "recipe": shared["recipe"] | {"lr": LR},
        "lora": {"rank": MODES["lora"], "alpha": LORA_ALPHA, "gputrain_targets": "DEFAULT_TARGETS",
                 "peft_targets": list(PEFT_TARGETS)},
        "data": {"task": "arithmetic", "digits": 3, "ops": "+-*", "examples": len(lengths),
                 "tokens_min": min(lengths), "tokens_max": max(lengths), "tokens_mean": statistics.mean(lengths),
                 "tokens_total": sum(lengths), "gputrain_padded_length": shared["gputrain_length"]},
        "base": f"gputrain train, {args.base_steps} steps on stdlib text", "logit_diff_gpt2_twin": shared["logit_diff"],
        "tokens_counted": "the conversations' tokens (N per conversation of N ids), never padding",
        "trl_padding": "right, to the longest conversation of each batch, with an attention mask",
        "gputrain_padding": f"every example to the longest of the data set ({shared['gputrain_length']} inputs), "
        "inputs with <|end|>, targets with IGNORE; no attention mask (causal: a real token never sees a pad)",
        "cpu": cpu_name(), "cores": os.cpu_count(), "threads": 1, "versions": versions(),
    }  # fmt: skip
    write_result(args.out, data, command=shlex.join(["python", "bench/sft_vs_trl.py", *sys.argv[1:]]))


if __name__ == "__main__":
    sys.exit(main())

"""gputrain.train: the configuration, the step, the guards, early stopping, logging (chapter 6)."""

import dataclasses
import math

import numpy as np
import pytest
import scipy.stats
import torch
import torch.nn as nn

from gputrain import train as T
from gputrain.model import GPT
from gputrain.train import SpikeDetector
from gputrain.train import checkpoint as C

# A model small enough that a step takes milliseconds on a loaded CPU.
SMALL = dict(
    n_layer=1,
    n_head=2,
    n_embd=32,
    block_size=32,
    batch_size=8,
    corpus_bytes=40_000,
    warmup_steps=2,
    eval_interval=0,
    progress=False,
)


def small(**overrides) -> T.TrainConfig:
    return T.TrainConfig(**{**SMALL, **overrides})


# --- configuration --------------------------------------------------------------


def test_every_field_has_a_help_comment():
    from gputrain.cli_spec import config_fields

    helps = {f.name: f.help for f in config_fields("gputrain.train.config", "TrainConfig")}
    assert [f.name for f in dataclasses.fields(T.TrainConfig) if not helps.get(f.name)] == []


@pytest.mark.parametrize("name", list(T.PRESETS))
def test_presets_are_valid_configs_with_overrides(name):
    cfg = T.preset_config(name, max_steps=1234, warmup_steps=0)
    assert isinstance(cfg, T.TrainConfig) and cfg.max_steps == 1234
    assert cfg.n_embd % cfg.n_head == 0


def test_gpt2_small_preset_has_gpt2_small_shape():
    from gputrain.model import GPT, count_params

    cfg = T.gpt2_small()
    assert (cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.block_size) == (12, 12, 768, 1024)
    assert cfg.batch_size * cfg.grad_accum_steps * cfg.block_size == 524_288  # ~0.5 M tokens per step
    with torch.device("meta"):  # shape only: no memory
        n = count_params(GPT(cfg.model_config()))
    assert 85e6 < n < 87e6


def test_unknown_preset_names_the_choices():
    with pytest.raises(ValueError, match="unknown preset 'huge'; use one of: tiny, small, gpt2_small"):
        T.preset_config("huge")


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"lr": float("nan")}, "lr must be a finite number"),
        ({"lr": 0.0}, "lr must be a positive"),
        ({"n_layer": 2.5}, "n_layer must be a int"),
        ({"compile": 1}, "compile must be a bool"),
        ({"grad_accum_steps": 0}, "grad_accum_steps must be >= 1"),
        ({"seq_len": 65, "block_size": 64}, "seq_len=65 exceeds the model's context block_size=64"),
        ({"vocab_size": 100}, "too small for bytes"),
        ({"val_fraction": 1.0}, "val_fraction must be in"),
        ({"schedule": "triangle"}, "schedule='triangle' is not one of: cosine, constant, linear, wsd, cosine-restarts"),
        ({"optimizer": "adagrad"}, "optimizer='adagrad' is not one of: adamw, adam, sgd, momentum, lion"),
        ({"mixed_precision": "int8"}, "mixed_precision='int8' is not one of: no, bf16, fp16, fp8"),
        ({"beta2": 1.0}, "beta2 must be in"),
        ({"decay_fraction": 0.0}, "decay_fraction must be in"),
        ({"dropout": 1.0}, "dropout must be in"),
        ({"patience": 3, "eval_interval": 0}, "patience needs validation passes"),
        ({"checkpoint_interval": 10}, "needs a checkpoint_dir"),
        ({"spike_window": 1}, "spike_window must be 0"),
        ({"spike_threshold": 0.0}, "spike_threshold must be > 0"),
        ({"tensorboard": True}, "tensorboard needs a log_dir"),
    ],
)
def test_each_bad_field_one_clear_error(bad, message):
    with pytest.raises(ValueError, match=message) as err:
        T.TrainConfig(**bad)
    assert "\n" not in str(err.value)


def test_missing_data_file_and_missing_resume_are_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="data file .*nope.txt' not found"):
        T.TrainConfig(data=str(tmp_path / "nope.txt"))
    with pytest.raises(FileNotFoundError, match="resume_from=.* does not exist"):
        T.TrainConfig(resume_from=str(tmp_path / "nothing"))


def test_hf_data_without_the_datasets_package_is_one_clear_error(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(ValueError, match="needs the datasets package: pip install datasets"):
        T.TrainConfig(data="hf:wikitext")


def hf_local_dataset(folder):
    """A local JSON-lines dataset whose text column is not the first column."""
    import json

    folder.mkdir()
    with open(folder / "part.jsonl", "w") as f:
        for i in range(400):
            f.write(json.dumps({"id": i, "text": f"def f{i}(x):\n    return x + {i}\n"}) + "\n")
    return folder


def test_hf_dataset_from_local_files_trains(tmp_path):
    pytest.importorskip("datasets", reason="the book extra installs datasets; pip install datasets")
    folder = hf_local_dataset(tmp_path / "ds")
    cfg = small(data=f"hf:{folder}:train", corpus_bytes=8_000, max_steps=3, seq_len=16)
    text = T.load_text(cfg)
    assert text.startswith("def f0(x):\n    return x + 0\n\ndef f1(x):")  # the text column, rows joined by newlines
    assert 7_900 <= len(text.encode()) <= 8_000  # corpus_bytes caps what is read
    assert len(T.train(cfg).losses) == 3


def test_hf_dataset_bad_split_or_name_is_one_clear_error(tmp_path):
    pytest.importorskip("datasets", reason="the book extra installs datasets; pip install datasets")
    folder = hf_local_dataset(tmp_path / "ds")
    with pytest.raises(ValueError, match=r"could not load it \(Unknown split .*nosuch.*check the name and split"):
        T.load_text(small(data=f"hf:{folder}:nosuch"))
    with pytest.raises(ValueError, match="could not load it"):
        T.load_text(small(data=f"hf:{tmp_path / 'no_such_folder_or_hub_name'}"))


def test_tensorboard_without_the_package_is_one_clear_error(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if not installed, even where it is
    with pytest.raises(ValueError, match="pip install tensorboard"):
        T.TrainConfig(tensorboard=True, log_dir=str(tmp_path))


# --- hardware checks: one clear error instead of a silent fallback -------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only errors")
@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"mixed_precision": "fp16"}, "needs a CUDA GPU"),
        ({"mixed_precision": "fp8"}, "needs an FP8 GPU"),
        ({"fsdp": True}, "fsdp=True needs CUDA GPUs"),
    ],
)
def test_hardware_the_cpu_lacks_is_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        T.train(small(max_steps=2, **overrides))


def test_bf16_on_the_cpu_really_trains_in_bf16():
    result = T.train(small(max_steps=6, mixed_precision="bf16"))
    assert all(math.isfinite(v) for v in result.losses)
    # Autocast rounds the matmuls to bf16: the losses differ from an fp32 run.
    fp32 = T.train(small(max_steps=6))
    assert result.losses != fp32.losses
    assert result.losses == pytest.approx(fp32.losses, abs=0.05)


# --- the loop -------------------------------------------------------------------


def test_the_loop_stays_in_modules_a_reader_can_hold():
    """loop.py had grown to 734 lines; the run's progress, its checks, its setup and its phases are now modules under
    300 lines, drawn in loop's docstring, each importing only the ones drawn above it; the old names still import."""
    from package_layout import MAX_FUNCTION_LINES, MAX_LINES, drawn_modules, function_lengths, gputrain_imports

    folder, order, _ = drawn_modules("gputrain.train.loop")
    assert order == ["progress", "hardware", "preflight", "start", "loop"]
    for i, name in enumerate(order):
        path = folder / f"{name}.py"
        assert len(path.read_text(encoding="utf-8").splitlines()) < MAX_LINES, f"{name}.py is too long"
        long = {f: n for f, n in function_lengths(path).items() if n >= MAX_FUNCTION_LINES}
        assert not long, f"{name}.py: {long}"
        siblings, _ = gputrain_imports(path, "gputrain.train")
        assert not siblings & ({""} | set(order[i + 1 :])), f"{name} imports {siblings & set(order[i + 1 :])}"
    from gputrain.train.loop import BestWeights, Progress, TrainResult, check_hardware, interrupt_line, read_resume

    assert Progress.__module__ == "gputrain.train.progress" and T.Progress is Progress
    assert all(callable(f) for f in (BestWeights, TrainResult, check_hardware, interrupt_line, read_resume))


def test_loss_falls_and_history_is_complete(tmp_path):
    result = T.train(small(max_steps=40, eval_interval=20, log_dir=str(tmp_path)))
    assert len(result.losses) == len(result.lrs) == len(result.grad_norms) == 40
    assert sum(result.losses[-5:]) / 5 < sum(result.losses[:5]) / 5 - 1.0
    assert [s for s, _ in result.val_losses] == [20, 40]
    assert result.steps == 40 and 0 < result.epochs < 1 and result.tokens_per_s > 0
    history = T.read_history(tmp_path / "metrics.csv")
    assert history["step"] == [float(s) for s in range(1, 41)]
    assert history["loss"] == pytest.approx(result.losses)
    logged = [(int(s), v) for s, v in zip(history["step"], history["val_loss"]) if not math.isnan(v)]
    assert [s for s, _ in logged] == [20, 40]
    assert [v for _, v in logged] == pytest.approx([v for _, v in result.val_losses])


def test_lr_follows_warmup_then_cosine():
    result = T.train(small(max_steps=20, warmup_steps=5, lr=1e-3, min_lr_ratio=0.1))
    expected = [1e-3 * T.lr_lambda(result.config)(k) for k in range(20)]
    assert result.lrs == pytest.approx(expected)
    assert result.lrs[4] == pytest.approx(1e-3) and result.lrs[-1] < 0.15e-3


def test_gradient_accumulation_equals_the_large_batch():
    """4 micro-batches of 4 make the same step as one batch of 16 (dropout off, same data order)."""
    big = T.train(small(max_steps=5, batch_size=16))
    accumulated = T.train(small(max_steps=5, batch_size=4, grad_accum_steps=4))
    # Same samples per step only holds within the first epoch and for this sampler: both
    # draw the same permutation and take it 16 at a time.
    assert accumulated.losses == pytest.approx(big.losses, rel=1e-5)
    a, b = big.model.state_dict(), accumulated.model.state_dict()
    C = big.config.n_embd
    for name in a:
        if name.endswith("qkv.bias"):
            # The key bias cannot change attention (softmax ignores a constant shift), so its
            # gradient is pure rounding noise, which Adam scales up to full-size steps. Compare
            # the query and value thirds only.
            a[name], b[name] = a[name][[*range(C), *range(2 * C, 3 * C)]], b[name][[*range(C), *range(2 * C, 3 * C)]]
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-6, msg=name)


def test_text_files_as_data(tmp_path):
    (tmp_path / "a.txt").write_text("alpha beta gamma\n" * 400)
    (tmp_path / "b.txt").write_text("delta epsilon\n" * 400)
    cfg = small(data=f"{tmp_path}/*.txt", max_steps=3, seq_len=16)
    assert T.load_text(cfg).startswith("alpha beta gamma")
    train_set, val_set = T.build_data(cfg)
    assert train_set[0][0].shape == (16,)
    assert len(T.train(cfg).losses) == 3


def test_empty_corpus_is_one_clear_error(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError, match="is empty; point --data at files with text"):
        T.train(small(data=str(tmp_path / "empty.txt")))


class Poisoned(torch.utils.data.Dataset):
    """Regression data where the sample ``bad`` is NaN: any batch holding it has a NaN loss."""

    def __init__(self, n=64, bad=()):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 4, generator=g)  # (N, 4)
        self.y = self.x @ torch.tensor([0.5, -1.0, 0.25, 1.5])  # (N,)
        for i in bad:
            self.x[i] = float("nan")

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def regression(n=64, bad=()):
    model = T.WithLoss(nn.Linear(4, 1), lambda out, y: nn.functional.mse_loss(out.squeeze(-1), y))
    return dict(model=model, train_data=Poisoned(n, bad), val_data=Poisoned(16))


def test_a_step_frees_the_logits_before_backward():
    """train_step keeps only the loss: the (B, T, V) logits are freed before backward, which never needs them."""
    import weakref

    from accelerate import Accelerator

    torch.manual_seed(0)
    model = GPT(small().model_config())
    logits_alive = []

    class Watched(nn.Module):  # the model, plus a weak reference to each step's logits
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, x, y):
            logits, loss = self.inner(x, y)
            ref = weakref.ref(logits)
            loss.register_hook(lambda g: logits_alive.append(ref() is not None) or g)  # runs as backward starts
            return logits, loss

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randint(0, model.cfg.vocab_size, (2, 16))
    stats = T.train_step(Watched(), [(x, x.roll(-1, 1))], opt, Accelerator(cpu=True), grad_clip=1.0)
    assert logits_alive == [False] and math.isfinite(stats.loss)


def test_poisoned_batch_is_skipped_and_counted():
    cfg = small(max_steps=24, batch_size=8, lr=0.1, grad_clip=0.0, spike_window=0, schedule="constant")
    result = T.train(cfg, **regression(n=192, bad=[5]))  # one epoch of 24 batches: the NaN is met once
    assert len(result.skipped) == 1 == sum(math.isnan(v) for v in result.losses)
    assert all(torch.isfinite(p).all() for p in result.model.parameters())
    finite = [v for v in result.losses if not math.isnan(v)]
    assert sum(finite[-4:]) < sum(finite[:4]) / 4  # it kept learning around the bad batch


def test_injected_inf_gradient_never_reaches_the_weights():
    seen = {}

    def hook(step, batch):
        x, y = batch
        if step == 3:  # a label of 1e30 makes a finite-looking batch with an infinite gradient
            y = y.clone()
            y[0] = 1e30
        return x, y

    def snapshot(step, batch):
        seen[step] = [p.detach().clone() for p in model.parameters()]
        return hook(step, batch)

    parts = regression()
    model = parts["model"]
    result = T.train(small(max_steps=5, batch_size=8, lr=0.05, spike_window=0), batch_hook=snapshot, **parts)
    assert result.skipped == [3]
    for before, after in zip(seen[3], seen[4]):
        assert torch.equal(before, after)  # step 3 changed nothing


def test_non_finite_steps_in_a_row_stop_the_run_with_the_checkpoint_intact(tmp_path):
    def hook(step, batch):
        x, y = batch
        return (x * float("nan"), y) if step > 6 else (x, y)

    cfg = small(
        max_steps=20, batch_size=8, max_bad_steps=3, checkpoint_dir=str(tmp_path), checkpoint_interval=5, spike_window=0
    )
    with pytest.raises(T.TrainingDiverged, match=r"3 steps in a row .* \(up to step 9\).*step_00000005"):
        T.train(cfg, batch_hook=hook, **regression())
    ckpt = C.read_checkpoint(tmp_path)
    assert ckpt.step == 5 and all(torch.isfinite(t).all() for t in ckpt.weights.values())


def test_spike_is_detected_and_can_be_skipped():
    def corrupt(step, batch):
        x, y = batch
        return (x, torch.full_like(y, 7)) if step == 30 else (x, y)  # every target the BEL byte

    logged = T.train(small(max_steps=32, spike_window=20, lr=1e-3), batch_hook=corrupt)
    assert logged.spikes == [30] and logged.skipped == []
    skipped = T.train(small(max_steps=32, spike_window=20, lr=1e-3, skip_spikes=True), batch_hook=corrupt)
    assert skipped.spikes == [30] and skipped.skipped == [30]
    assert skipped.losses[:30] == logged.losses[:30]  # identical until the spike


def test_early_stopping_restores_the_best_weights():
    # 3 KB of text, a high constant rate, validation every 4 steps: it stops within a few dozen
    cfg = small(
        corpus_bytes=3_000,
        max_steps=200,
        lr=2e-2,
        eval_interval=4,
        patience=2,
        warmup_steps=0,
        schedule="constant",
        weight_decay=0.0,
        eval_batches=2,
    )
    result = T.train(cfg)
    assert result.stopped_early and result.steps < 200
    vals = dict(result.val_losses)
    assert result.best_val_loss == min(vals.values()) == vals[result.best_step]
    assert result.steps == result.best_step + cfg.patience * cfg.eval_interval
    # the returned model holds the best weights: evaluating it reproduces the best loss
    _, val_set = T.build_data(cfg)
    x, y = next(iter(torch.utils.data.DataLoader(val_set, batch_size=8 * 2)))  # what 2 batches of 8 cover
    with torch.no_grad():
        loss = result.model(x, y)[1].item()  # windows have equal length: per-sample mean = overall mean
    assert loss == pytest.approx(result.best_val_loss, rel=1e-5)


def test_evaluate_weights_every_sample_once():
    from accelerate import Accelerator

    model = T.WithLoss(nn.Linear(4, 1), lambda out, y: nn.functional.mse_loss(out.squeeze(-1), y))
    data = Poisoned(30)
    loader = torch.utils.data.DataLoader(data, batch_size=8)  # 8 + 8 + 8 + 6
    value = T.evaluate(model, loader, Accelerator(cpu=True), max_batches=10)
    with torch.no_grad():
        expected = nn.functional.mse_loss(model.model(data.x).squeeze(-1), data.y).item()
    assert value == pytest.approx(expected, rel=1e-6)


def test_plot_history_from_result_and_csv(tmp_path):
    import matplotlib

    matplotlib.use("Agg")

    def corrupt(step, batch):
        x, y = batch
        return (x, torch.full_like(y, 7)) if step == 25 else (x, y)

    result = T.train(
        small(max_steps=28, spike_window=20, eval_interval=14, skip_spikes=True, log_dir=str(tmp_path)),
        batch_hook=corrupt,
    )
    assert result.spikes and result.skipped == result.spikes  # a skipped spike counts as both
    history = T.read_history(tmp_path / "metrics.csv")
    assert T.event_steps(zip(history["step"], history["event"])) == (result.skipped, result.spikes)
    marked = []
    for source in (result, tmp_path / "metrics.csv"):
        fig = T.plot_history(source)
        assert len(fig.axes) == 3
        assert len(fig.axes[1].lines[0].get_xdata()) == 28
        marked.append([c.get_offsets().tolist() for c in fig.axes[0].collections])
    assert marked[0] == marked[1]  # the same spike and skip markers from the result and from its CSV


# --- the spike detector against scipy's robust statistics ----------------------------


def test_spike_score_is_scipys_robust_z():
    g = torch.Generator().manual_seed(1)
    values = (3.0 + 0.1 * torch.randn(200, generator=g)).tolist()
    det = SpikeDetector(window=50, threshold=6.0)
    for i, v in enumerate(values):
        window = values[max(0, i - 50) : i]
        if len(window) >= det.min_history:
            med = float(np.median(window))
            mad = scipy.stats.median_abs_deviation(window, scale="normal")  # 1.4826 * MAD
            assert det.score(v) == pytest.approx((v - med) / mad, rel=1e-4)
        det.update(v)


def test_spike_detector_flags_a_jump_but_not_noise_and_round_trips():
    g = torch.Generator().manual_seed(2)
    det = SpikeDetector(window=30, threshold=6.0)
    flags = [det.update(2.0 + 0.05 * float(torch.randn(1, generator=g))) for _ in range(300)]
    assert sum(flags) == 0
    copy = SpikeDetector(window=30, threshold=6.0)
    copy.load_state_dict(det.state_dict())
    assert copy.score(3.0) == det.score(3.0) > 6.0
    assert det.update(3.0) and not det.update(float("nan"))


# --- memory and speed switches ------------------------------------------------------


def test_activation_checkpointing_saves_memory_without_changing_the_run():
    from gputrain.memory import is_checkpointed

    plain = T.train(small(max_steps=4, dropout=0.1))
    recomputed = T.train(small(max_steps=4, dropout=0.1, activation_checkpointing=True))
    assert is_checkpointed(recomputed.model) and not is_checkpointed(plain.model)
    # the recomputation replays the same dropout masks: the same losses
    assert recomputed.losses == pytest.approx(plain.losses, rel=1e-6)


@pytest.mark.gpu
def test_bf16_and_compile_train_on_a_gpu():
    result = T.train(small(max_steps=30, mixed_precision="bf16", compile=True))
    assert sum(result.losses[-5:]) < sum(result.losses[:5]) - 5 * 0.5


@pytest.mark.gpu
def test_fp16_scaler_overflows_are_not_counted_as_bad_data():
    result = T.train(small(max_steps=30, mixed_precision="fp16", max_bad_steps=2))
    assert result.skipped == [] and sum(result.losses[-5:]) < sum(result.losses[:5])


@pytest.mark.gpu
def test_fp8_runs_where_a_backend_exists_or_says_what_is_missing():
    import importlib.util

    cfg = small(max_steps=4, n_embd=64, n_head=4, mixed_precision="fp8")
    has_backend = any(importlib.util.find_spec(m) for m in ("torchao", "transformer_engine", "msamp"))
    if torch.cuda.get_device_capability() >= (8, 9) and has_backend:
        assert len(T.train(cfg).losses) == 4
    else:
        with pytest.raises(ValueError, match="fp8"):
            T.train(cfg)


@pytest.mark.gpu
@pytest.mark.multiprocess
def test_fsdp2_through_accelerate_on_gpus(tmp_path):
    """FSDP2 (Accelerate's plugin, fsdp_version=2) on every GPU, launched for real with torchrun."""
    import subprocess
    import sys

    n = min(2, torch.cuda.device_count())
    flags = [
        "--n-layer",
        "2",
        "--n-head",
        "2",
        "--n-embd",
        "64",
        "--block-size",
        "32",
        "--batch-size",
        "8",
        "--corpus-bytes",
        "60000",
        "--warmup-steps",
        "2",
        "--max-steps",
        "20",
        "--eval-interval",
        "10",
        "--fsdp",
        "--no-progress",
        "--log-dir",
        str(tmp_path),
    ]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            str(n),
            "-m",
            "gputrain",
            "train",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    losses = T.read_history(tmp_path / "metrics.csv")["loss"]
    assert len(losses) == 20 and sum(losses[-3:]) < sum(losses[:3]) - 3 * 0.5


@pytest.mark.parametrize("extra", [{"checkpoint_dir": "ckpt"}, {"patience": 2, "eval_interval": 5}])
def test_fsdp_with_checkpoints_or_early_stopping_is_refused(monkeypatch, extra):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on a GPU machine
    with pytest.raises(ValueError, match="with fsdp=True are not supported"):
        T.check_hardware(small(fsdp=True, **extra))

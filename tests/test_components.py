"""gputrain.train.components: optimizers and schedules chosen by name, Lion against its published rule."""

import copy
import math

import pytest
import torch
from helpers import SMALL_GPT, cli_flags, run_cli

from gputrain import optim, schedule
from gputrain.cli import build_parser
from gputrain.model import GPT
from gputrain.moe import MoE
from gputrain.train import (
    OPTIMIZERS,
    SCHEDULES,
    TrainConfig,
    load_model,
    lr_lambda,
    make_optimizer,
    param_groups,
    train,
)


def lion_reference(w, grads, lr, beta1, beta2, wd):
    """Lion as Chen et al. 2023 (Algorithm 2) write it, in plain Python floats, one coordinate at a time."""
    w, m, out = list(w), [0.0] * len(w), []
    for g in grads:
        for i in range(len(w)):
            c = beta1 * m[i] + (1 - beta1) * g[i]
            sign = (c > 0) - (c < 0)
            w[i] = w[i] - lr * (sign + wd * w[i])
            m[i] = beta2 * m[i] + (1 - beta2) * g[i]
        out.append(list(w))
    return out


def test_lion_follows_the_published_update_rule():
    gen = torch.Generator().manual_seed(0)
    w0 = torch.randn(7, generator=gen, dtype=torch.float64)
    grads = [torch.randn(7, generator=gen, dtype=torch.float64) for _ in range(12)]
    p = torch.nn.Parameter(w0.clone())
    opt = optim.Lion([p], lr=0.01, betas=(0.9, 0.99), weight_decay=0.1)
    expected = lion_reference(w0.tolist(), [g.tolist() for g in grads], 0.01, 0.9, 0.99, 0.1)
    for g, want in zip(grads, expected):
        p.grad = g.clone()
        opt.step()
        assert p.detach().tolist() == pytest.approx(want, abs=1e-12)
    assert set(opt.state[p]) == {"exp_avg"}  # one buffer: half of Adam's state


def test_lion_rejects_bad_betas():
    with pytest.raises(ValueError, match="beta"):
        optim.Lion([torch.nn.Parameter(torch.zeros(2))], betas=(1.0, 0.99))


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_every_optimizer_name_builds_and_steps(name):
    model = torch.nn.Linear(4, 3)
    opt = make_optimizer(model, TrainConfig(optimizer=name, lr=1e-2))
    before = model.weight.detach().clone()
    model(torch.randn(5, 4)).square().mean().backward()
    opt.step()
    assert not torch.equal(before, model.weight)
    decays = sorted(g["weight_decay"] for g in opt.param_groups)
    assert decays == [0.0, 0.1]  # the bias gets none


def test_scratch_adamw_trains_the_gpt_along_torchs_curve():
    """Chapter 5's AdamW in the real loop: the same losses as torch.optim.AdamW, step for step."""
    base = dict(
        **SMALL_GPT,
        corpus_bytes=30_000,
        max_steps=8,
        warmup_steps=2,
        eval_interval=0,
        progress=False,
    )
    ours = train(TrainConfig(optimizer="scratch-adamw", **base)).losses
    torchs = train(TrainConfig(optimizer="adamw", **base)).losses
    assert ours == pytest.approx(torchs, rel=1e-5)
    assert ours[-1] < ours[0]


def test_muon_by_name_trains_the_gpt_and_resumes_from_its_checkpoint(tmp_path):
    base = dict(
        **SMALL_GPT,
        corpus_bytes=30_000,
        warmup_steps=2,
        eval_interval=0,
        progress=False,
        max_steps=10,
    )
    straight = train(TrainConfig(**base, optimizer="muon", checkpoint_dir=str(tmp_path), checkpoint_interval=3,
                                 keep_checkpoints=10))  # fmt: skip
    resumed = train(TrainConfig(**base, optimizer="muon", resume_from=str(tmp_path / "step_00000006")))
    assert resumed.losses == straight.losses  # the momentum buffers and AdamW's moments came back exactly
    assert straight.losses[-1] < straight.losses[0] - 0.3
    adamw = train(TrainConfig(**base, optimizer="adamw"))
    assert adamw.losses[0] == straight.losses[0] and adamw.losses[1] != straight.losses[1]


def test_schedules_by_name_have_their_shapes():
    cfg = dict(max_steps=100, warmup_steps=10, min_lr_ratio=0.1)
    f = {name: lr_lambda(TrainConfig(schedule=name, decay_fraction=0.2, restart_steps=30, **cfg)) for name in SCHEDULES}
    assert [f["constant"](k) for k in (0, 9, 50, 99)] == [0.1, 1.0, 1.0, 1.0]
    assert f["linear"](55) == pytest.approx(0.1 + 0.9 * 0.5)  # halfway down the line
    assert [f["wsd"](k) for k in (10, 79)] == [1.0, 1.0] and f["wsd"](90) == pytest.approx(0.1 + 0.9 * 0.5)
    assert f["cosine"](55) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    restarts = [f["cosine-restarts"](k) for k in range(10, 100)]
    assert restarts[0] == 1.0 and restarts[30] == 1.0 and min(restarts) < 0.2  # back to the top every 30 steps
    assert f["wsd"](99) == pytest.approx(0.1 + 0.9 / 20)


def test_wsd_rejects_a_bad_decay_fraction():
    with pytest.raises(ValueError, match="decay_fraction"):
        schedule.wsd(100, 10, decay_fraction=1.5)


def test_cli_flags_offer_exactly_the_table_names():
    train_parser = next(a for a in build_parser()._subparsers._group_actions[0].choices.items() if a[0] == "train")[1]
    choices = {a.dest: a.choices for a in train_parser._actions if a.choices}
    assert list(choices["optimizer"]) == list(OPTIMIZERS) and list(choices["schedule"]) == list(SCHEDULES)


def test_the_cli_trains_a_mixture_of_experts_gpt(tmp_path):
    """--n-experts turns every MLP into a DeepSeekMoE layer; the loop nudges the routers' biases."""
    flags = cli_flags(**SMALL_GPT, corpus_bytes=30_000, warmup_steps=0, eval_interval=0, max_steps=3)
    moe = cli_flags(n_experts=4, top_k=2, bias_gamma=0.01, checkpoint_dir=tmp_path, quiet=True)
    out = run_cli("train", *flags, *moe)
    assert out.returncode == 0, out.stderr
    model, _ = load_model(tmp_path)
    layers = [m for m in model.modules() if isinstance(m, MoE)]
    assert isinstance(model, GPT) and len(layers) == 1
    assert layers[0].router.e_bias.abs().sum() > 0  # three updates of +-0.01 moved the bias
    bad = run_cli("train", "--n-experts", "4", "--top-k", "8")
    assert bad.returncode == 2 and "top_k=8 is larger than n_experts=4" in bad.stderr


def test_readme_table_names_every_choice():
    """The README's table of components spells the same names as the package's tables."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    for flag, table in (("--optimizer", OPTIMIZERS), ("--schedule", SCHEDULES)):
        row = next(line for line in readme.splitlines() if line.startswith(f"| `{flag}`"))
        assert set(re.findall(r"`([a-z0-9-]+)`", row.split("|")[2])) == set(table), flag


@pytest.mark.parametrize(
    "name, reference",
    [
        ("adamw", lambda g: torch.optim.AdamW(g, lr=1e-2, betas=(0.9, 0.95), fused=False)),
        ("adam", lambda g: torch.optim.Adam(g, lr=1e-2, betas=(0.9, 0.95), fused=False)),
        ("sgd", lambda g: torch.optim.SGD(g, lr=1e-2)),
        ("momentum", lambda g: torch.optim.SGD(g, lr=1e-2, momentum=0.9)),
    ],
)
def test_the_torch_optimizers_without_compiler_hooks_are_torchs_to_the_bit(name, reference):
    """The run's torch optimizers skip the wrappers that import torch._dynamo; the arithmetic and the state
    dict are torch's: the same bits for 12 steps, and a state dict saved by torch's class continues identically."""
    gen = torch.Generator().manual_seed(0)
    cfg = TrainConfig(optimizer=name, lr=1e-2, beta1=0.9, beta2=0.95, weight_decay=0.1)
    ours_model, torch_model, resumed_model = (torch.nn.Linear(6, 5) for _ in range(3))
    for m in (torch_model, resumed_model):
        m.load_state_dict(ours_model.state_dict())
    ours = make_optimizer(ours_model, cfg)
    theirs = reference(param_groups(torch_model, 0.1))
    assert type(ours).__mro__[1] is type(theirs) and isinstance(ours, torch.optim.Optimizer)
    resumed = None
    for step in range(12):
        grads = [torch.randn(p.shape, generator=gen) for p in ours_model.parameters()]
        models = (ours_model, torch_model) + ((resumed_model,) if resumed else ())
        for model, opt in zip(models, (ours, theirs, resumed)):
            for p, g in zip(model.parameters(), grads):
                p.grad = g.clone()
            opt.step()
            opt.zero_grad(set_to_none=True)
            assert all(p.grad is None for p in model.parameters())
        if step == 5:  # torch's state dict into ours, mid-run
            resumed_model.load_state_dict(torch_model.state_dict())
            resumed = make_optimizer(resumed_model, cfg)
            resumed.load_state_dict(copy.deepcopy(theirs.state_dict()))  # as from disk: no shared buffers
        for a, b in zip(ours_model.parameters(), torch_model.parameters()):
            assert torch.equal(a, b), f"{name}: step {step} differs from torch"
    for a, b in zip(resumed_model.parameters(), torch_model.parameters()):
        assert torch.equal(a, b)
    assert ours.state_dict()["param_groups"] == theirs.state_dict()["param_groups"]


def test_clip_gradients_is_accelerates_clip_in_one_process():
    """train_step's clip skips Accelerate's DTensor search in one process: the same norm, the same gradients."""
    from accelerate import Accelerator

    from gputrain.train.step import clip_gradients

    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(4, 3, generator=gen) * 5, torch.randn(3, generator=gen)]
    results = []
    for clip in (
        lambda ps: clip_gradients(Accelerator(cpu=True), ps, 1.0),
        lambda ps: Accelerator(cpu=True).clip_grad_norm_(ps, 1.0),
    ):
        params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        results.append((clip(params), [p.grad for p in params]))
    (norm, clipped), (norm_ref, clipped_ref) = results
    assert torch.equal(norm, norm_ref) and norm > 1.0  # it did clip
    assert all(torch.equal(a, b) for a, b in zip(clipped, clipped_ref))

"""gputrain.optim against torch.optim: 50 steps side by side, state dicts, bad input.

Each from-scratch optimizer and its PyTorch counterpart start from the same
parameters and see the same gradients (fresh random ones every step, some
parameters without a gradient on some steps).  Parameters must agree within
1e-6 at every step.  Run with ``-s`` to see the largest deviation of each.
"""

from __future__ import annotations

import copy

import pytest
import torch
from package_layout import check_exports, check_layout

from gputrain import optim

STEPS = 50
TOL = 1e-6

# (name, ours, theirs, keyword arguments shared by both)
CASES = [
    ("SGD", optim.SGD, torch.optim.SGD, dict(lr=0.05)),
    ("SGD+wd", optim.SGD, torch.optim.SGD, dict(lr=0.05, weight_decay=0.1)),
    ("Momentum", optim.Momentum, torch.optim.SGD, dict(lr=0.02, momentum=0.9)),
    (
        "Momentum+damp+wd",
        optim.Momentum,
        torch.optim.SGD,
        dict(lr=0.02, momentum=0.8, dampening=0.1, weight_decay=0.05),
    ),
    ("Nesterov+wd", optim.Momentum, torch.optim.SGD, dict(lr=0.02, momentum=0.9, nesterov=True, weight_decay=0.05)),
    ("RMSprop", optim.RMSprop, torch.optim.RMSprop, dict(lr=0.01)),
    (
        "RMSprop+mom+centered+wd",
        optim.RMSprop,
        torch.optim.RMSprop,
        dict(lr=0.005, alpha=0.9, momentum=0.5, centered=True, weight_decay=0.05),
    ),
    ("Adam", optim.Adam, torch.optim.Adam, dict(lr=0.01)),
    ("Adam+wd", optim.Adam, torch.optim.Adam, dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    ("AdamW", optim.AdamW, torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1)),
]
IDS = [c[0] for c in CASES]

# PyTorch has up to three implementations of each update: a per-parameter loop,
# "foreach" (one kernel over all parameters, the default on GPUs) and "fused"
# (Adam, AdamW and SGD without momentum here: its momentum path rejects
# parameters whose gradient appears late).  Ours is compared with each.
IMPLS = {"for-loop": dict(foreach=False), "foreach": dict(foreach=True), "fused": dict(fused=True)}
FUSED_OK = {"SGD", "SGD+wd", "Adam", "Adam+wd", "AdamW"}
MATRIX = [
    pytest.param(*case, impl, id=f"{case[0]}-{impl}")
    for case in CASES
    for impl in IMPLS
    if impl != "fused" or case[0] in FUSED_OK
]


def make_params(seed: int) -> list[torch.Tensor]:
    """A matrix, a vector, a scalar and a 3-D tensor, float32, in a fixed random state."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(7, 5), (5,), (), (2, 3, 4)]
    return [torch.randn(s, generator=g).requires_grad_() for s in shapes]


def fake_grads(step: int, shapes: list[torch.Size], seed: int) -> list[torch.Tensor | None]:
    """Fresh gradients per step; gradients of mixed scale, and some missing (None)."""
    g = torch.Generator().manual_seed(seed * 1000 + step)
    grads: list[torch.Tensor | None] = []
    for i, s in enumerate(shapes):
        scale = 10.0 ** (i - 1)  # 0.1 ... 100: adaptive methods must handle the spread
        grads.append(scale * torch.randn(s, generator=g))
    if step % 3 == 1:
        grads[1] = None  # a parameter that got no gradient this step (frozen/unused branch)
    grads[3] = None if step < 5 else grads[3]  # one that only starts receiving gradients later
    return grads


def give_same_grads(a: list[torch.Tensor], b: list[torch.Tensor], step: int, seed: int = 0) -> None:
    """Set step ``step``'s gradients on both parameter lists (separate copies, same values)."""
    for p, q, g in zip(a, b, fake_grads(step, [p.shape for p in a], seed)):
        p.grad = None if g is None else g.to(p.device)
        q.grad = None if g is None else g.to(q.device, copy=True)


def run_side_by_side(
    ours_cls, theirs_cls, kwargs: dict, seed: int = 0, steps: int = STEPS, impl: str = "for-loop", device: str = "cpu"
):
    """Step both optimizers; return the max |difference| of parameters over all steps."""
    mine = [p.detach().to(device).requires_grad_() for p in make_params(seed)]
    ref = [p.detach().clone().requires_grad_() for p in mine]
    a, b = ours_cls(mine, **kwargs), theirs_cls(ref, **IMPLS[impl], **kwargs)
    worst = 0.0
    for step in range(steps):
        give_same_grads(mine, ref, step, seed)
        a.step()
        b.step()
        for p, q in zip(mine, ref):
            diff = (p - q).abs().max().item()
            worst = max(worst, diff)
            assert diff <= TOL, f"step {step}: parameters differ by {diff:.3g}"
    return worst, a, b, mine, ref


@pytest.mark.parametrize("name,ours,theirs,kwargs,impl", MATRIX)
def test_matches_torch_every_step(name, ours, theirs, kwargs, impl):
    worst, *_ = run_side_by_side(ours, theirs, kwargs, impl=impl)
    print(f"\n{name} vs torch ({impl}): max |w_ours - w_torch| over {STEPS} steps = {worst:.3g}")
    assert worst <= TOL


@pytest.mark.gpu
@pytest.mark.parametrize("name,ours,theirs,kwargs,impl", MATRIX)
def test_matches_torch_every_step_on_cuda(name, ours, theirs, kwargs, impl):
    worst, *_ = run_side_by_side(ours, theirs, kwargs, impl=impl, device="cuda")
    print(f"\n{name} vs torch ({impl}, CUDA): max |w_ours - w_torch| over {STEPS} steps = {worst:.3g}")
    assert worst <= TOL


@pytest.mark.parametrize("name,ours,theirs,kwargs", CASES, ids=IDS)
def test_moves_parameters(name, ours, theirs, kwargs):
    """Guard against a vacuous match: both optimizers really changed every parameter."""
    start = make_params(0)
    *_, mine, _ = run_side_by_side(ours, theirs, kwargs, steps=10)
    for p0, p in zip(start, mine):
        assert (p - p0).abs().max() > 1e-3


def test_parameters_without_grad_get_no_state():
    w = torch.ones(3, requires_grad=True)
    unused = torch.ones(3, requires_grad=True)
    opt = optim.Adam([w, unused], lr=0.1)
    w.grad = torch.ones(3)
    opt.step()
    assert unused not in opt.state and torch.equal(unused, torch.ones(3))
    assert set(opt.state[w]) == {"step", "exp_avg", "exp_avg_sq"}


@pytest.mark.parametrize("name,ours,theirs,kwargs", CASES, ids=IDS)
def test_state_dict_round_trip_continues_identically(name, ours, theirs, kwargs):
    """Save after 20 steps, load into a fresh optimizer, continue: same path as never stopping."""
    _, opt, _, params, _ = run_side_by_side(ours, theirs, kwargs, steps=20)
    saved_params = [p.detach().clone() for p in params]
    saved = copy.deepcopy(opt.state_dict())

    resumed = [p.clone().requires_grad_() for p in saved_params]
    opt2 = ours(resumed, **kwargs)
    opt2.load_state_dict(saved)
    assert opt2.state_dict()["param_groups"] == saved["param_groups"]
    for k, per_param in saved["state"].items():
        for key, value in per_param.items():
            got = opt2.state_dict()["state"][k][key]
            assert torch.equal(torch.as_tensor(got), torch.as_tensor(value)), (k, key)

    for step in range(20, 30):
        give_same_grads(params, resumed, step)
        opt.step()
        opt2.step()
        for p, q in zip(params, resumed):
            assert torch.equal(p, q)  # bit for bit: same state, same arithmetic


@pytest.mark.parametrize("name,ours,theirs,kwargs", CASES, ids=IDS)
def test_torch_state_dict_loads_and_continues(name, ours, theirs, kwargs):
    """A state dict written by torch.optim continues in ours as it would have in torch."""
    _, _, ref_opt, _, ref_params = run_side_by_side(ours, theirs, kwargs, steps=20)
    mine = [p.detach().clone().requires_grad_() for p in ref_params]
    opt = ours(mine, **kwargs)
    opt.load_state_dict(copy.deepcopy(ref_opt.state_dict()))
    for step in range(20, 40):
        give_same_grads(mine, ref_params, step)
        opt.step()
        ref_opt.step()
        for p, q in zip(mine, ref_params):
            torch.testing.assert_close(p, q, atol=TOL, rtol=0)


def test_closure_is_called_and_its_loss_returned():
    w = torch.tensor([2.0], requires_grad=True)
    opt = optim.Momentum([w], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = (w**2).sum()
        loss.backward()
        return loss

    assert opt.step(closure).item() == pytest.approx(4.0)
    assert w.item() == pytest.approx(2.0 - 0.1 * 4.0)


def test_trains_a_real_model_like_torch():
    """A small MLP on the digits: our AdamW and torch's reach the same weights and loss."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x[:512], dtype=torch.float32) / 16.0
    y = torch.tensor(y[:512])
    losses = {}
    for label, cls in [("ours", optim.AdamW), ("torch", torch.optim.AdamW)]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
        opt = cls(model.parameters(), lr=1e-2, weight_decay=0.01)
        for _ in range(30):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        losses[label] = (loss.item(), torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert losses["ours"][0] < 0.5  # it learned (ln 10 = 2.3 at the start)
    assert losses["ours"][0] == pytest.approx(losses["torch"][0], abs=1e-5)
    torch.testing.assert_close(losses["ours"][1], losses["torch"][1], atol=TOL, rtol=0)


def test_state_bytes_adam_is_twice_the_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Linear(32, 10))
    n_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    opts = {
        "SGD": (optim.SGD, 0),
        "Momentum": (optim.Momentum, 1),
        "RMSprop": (optim.RMSprop, 1),
        "Adam": (optim.Adam, 2),
        "AdamW": (optim.AdamW, 2),
    }
    for name, (cls, copies) in opts.items():
        opt = cls(model.parameters(), lr=1e-3)
        model(torch.randn(4, 64)).sum().backward()
        opt.step()
        assert optim.state_bytes(opt) == copies * n_bytes, name
        model.zero_grad()


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda p: optim.SGD(p, lr=0.0), "lr=0.0 must be > 0"),
        (lambda p: optim.Adam(p, lr=-1e-3), "lr=-0.001 must be > 0"),
        (lambda p: optim.Momentum(p, lr=float("nan")), "must be > 0"),
        (lambda p: optim.Adam(p, betas=(1.0, 0.999)), r"betas\[0\]=1.0 must be in \[0, 1\)"),
        (lambda p: optim.AdamW(p, betas=(0.9, -0.1)), r"betas\[1\]=-0.1 must be in \[0, 1\)"),
        (lambda p: optim.Adam(p, betas=(0.9,)), "must be a pair"),
        (lambda p: optim.Adam(p, eps=-1e-8), "eps=-1e-08 must be >= 0"),
        (lambda p: optim.AdamW(p, weight_decay=-0.01), "weight_decay=-0.01 must be >= 0"),
        (lambda p: optim.SGD(p, lr=0.1, weight_decay=-1), "weight_decay=-1 must be >= 0"),
        (lambda p: optim.RMSprop(p, alpha=1.5), r"alpha=1.5 must be in \[0, 1\)"),
        (lambda p: optim.Momentum(p, lr=0.1, momentum=1.0), r"momentum=1.0 must be in \[0, 1\)"),
        (lambda p: optim.Momentum(p, lr=0.1, momentum=0.9, dampening=0.5, nesterov=True), "nesterov=True needs"),
    ],
)
def test_bad_input_raises_one_clear_error(make, match):
    with pytest.raises(ValueError, match=match) as info:
        make([torch.zeros(2, requires_grad=True)])
    assert "\n" not in str(info.value)


def test_descend_runs_side_by_side_equal_separate_runs():
    curv = torch.tensor([1.0, 10.0], dtype=torch.float64)

    def bowl(w):  # (n, 2) -> (n,)
        return 0.5 * (curv * w**2).sum(-1)

    paths, losses = optim.descend(bowl, [1.0, 1.0], lambda g: optim.Adam(g), [0.1, 0.01], 20)
    alone, _ = optim.descend(bowl, [1.0, 1.0], lambda g: optim.Adam(g), [0.01], 20)
    assert paths.shape == (21, 2, 2) and losses.shape == (21, 2)
    assert torch.equal(paths[:, 1], alone[:, 0])  # the runs do not leak into each other
    sgd, _ = optim.descend(bowl, [1.0, 1.0], lambda g: optim.SGD(g), [0.05], 10)
    expected = torch.stack([(1 - 0.05 * curv) ** k for k in range(11)])  # (11, 2): GD's closed form
    torch.testing.assert_close(sgd[:, 0], expected, rtol=1e-12, atol=0)


def test_steps_to_requires_staying_below():
    nan = float("nan")
    losses = torch.tensor([[5.0, 5.0, 5.0], [0.5, nan, 0.5], [2.0, nan, 0.5], [0.1, nan, 0.5], [0.05, nan, 0.5]])
    assert optim.steps_to(losses, tol=1.0) == [3, None, 1]


# --- Muon: against torch.optim.Muon (matrices) next to torch.optim.AdamW (the rest) ----------------


def _gpt_and_batches(seed: int = 0, bias: bool = True):
    from gputrain.model import GPT, GPTConfig

    torch.manual_seed(seed)
    cfg = GPTConfig(vocab_size=40, block_size=12, n_layer=2, n_head=2, n_embd=24, bias=bias)
    gen = torch.Generator().manual_seed(seed + 1)
    batches = [torch.randint(0, 40, (4, 13), generator=gen) for _ in range(12)]  # (B, T+1)
    return GPT(cfg), batches


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("adjust", ["original", "match_rms_adamw"])
@pytest.mark.parametrize("nesterov", [True, False])
def test_muon_matches_torch_muon_and_adamw_every_step(adjust, nesterov, device):
    from gputrain.train import param_groups

    ours_model, batches = _gpt_and_batches()
    ours_model, batches = ours_model.to(device), [x.to(device) for x in batches]
    ref_model = copy.deepcopy(ours_model)
    hp = dict(lr=0.02, weight_decay=0.1, momentum=0.9, nesterov=nesterov)
    ours = optim.Muon(param_groups(ours_model, 0.1), **hp, adjust_lr=adjust, betas=(0.9, 0.95), adamw_eps=1e-8)
    muon_groups, adam_groups = [], []
    for group in param_groups(ref_model, 0.1):
        muon_groups.append({**group, "params": [p for p in group["params"] if optim.uses_muon(p, group)]})
        adam_groups.append({**group, "params": [p for p in group["params"] if not optim.uses_muon(p, group)]})
    # the embedding table (tied to the head) and the position table go to AdamW, every block matrix to Muon
    assert sum(p.numel() for g in adam_groups for p in g["params"] if p.dim() == 2) == (40 + 12) * 24
    muon = torch.optim.Muon([g for g in muon_groups if g["params"]], **hp, adjust_lr_fn=adjust)
    adamw = torch.optim.AdamW(adam_groups, lr=0.02, betas=(0.9, 0.95), eps=1e-8, foreach=False)
    worst = 0.0
    for x in batches:
        for model, opts in ((ours_model, (ours,)), (ref_model, (muon, adamw))):
            model.zero_grad(set_to_none=True)
            model(x[:, :-1], x[:, 1:])[1].backward()
            for opt in opts:
                opt.step()
        diff = max((a - b).abs().max().item() for a, b in zip(ours_model.parameters(), ref_model.parameters()))
        worst = max(worst, diff)
        assert diff <= TOL
    moved = ours_model.blocks[0].attn.qkv.weight.cpu() - _gpt_and_batches()[0].blocks[0].attn.qkv.weight
    assert moved.abs().max() > 1e-3  # the runs really trained
    print(f"\nMuon ({adjust}, nesterov={nesterov}, {device}) vs torch.optim.Muon + AdamW: max |difference| {worst:.3g}")


def test_muon_state_is_one_buffer_for_matrices_two_for_the_rest():
    model, batches = _gpt_and_batches(bias=False)
    opt = optim.Muon(model.parameters(), lr=0.01)
    model(batches[0][:, :-1], batches[0][:, 1:])[1].backward()
    opt.step()
    for p in model.parameters():
        assert set(opt.state[p]) == (
            {"momentum_buffer"} if optim.uses_muon(p, {}) else {"step", "exp_avg", "exp_avg_sq"}
        )
    matrices = sum(p.numel() for p in model.parameters() if optim.uses_muon(p, {}))
    rest = sum(p.numel() for p in model.parameters()) - matrices
    assert optim.state_bytes(opt) == 4 * (matrices + 2 * rest)
    state = opt.state_dict()
    import json

    json.dumps(state["param_groups"])  # JSON checkpoints store the groups: no torch.dtype inside
    again = optim.Muon(model.parameters(), lr=0.01)
    again.load_state_dict(state)
    assert again.param_groups[0]["ns_dtype"] == "bfloat16"


@pytest.mark.parametrize("shape", [(6, 10), (10, 6), (8, 8)])
def test_newton_schulz_maps_each_singular_value_through_the_quintic(shape):
    from torch.utils.flop_counter import FlopCounterMode

    g = torch.randn(shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    U, S, Vh = torch.linalg.svd(g, full_matrices=False)
    a, b, c = optim.NS_COEFFICIENTS
    s = S / g.norm()
    for _ in range(5):
        s = a * s + b * s**3 + c * s**5
    with FlopCounterMode(display=False) as counter:
        out = optim.newton_schulz(g, dtype=None)
    torch.testing.assert_close(out, U @ torch.diag(s) @ Vh, atol=1e-12, rtol=0)  # singular vectors kept
    assert 0.6 < s.min() and s.max() < 1.25  # every direction about the same size
    m, n = min(shape), max(shape)
    assert counter.get_total_flops() == 5 * (4 * m * m * n + 2 * m**3)
    assert optim.newton_schulz_flops(shape) == counter.get_total_flops()  # the count chapter 5 uses
    bf16 = optim.newton_schulz(g.float())
    assert bf16.dtype == torch.bfloat16 and (bf16.double() - out).abs().max() < 0.05


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(adjust_lr="fast"), "adjust_lr='fast' is not one of: original, match_rms_adamw"),
        (dict(ns_dtype="bf17"), "ns_dtype='bf17' is not a torch dtype"),
        (dict(momentum=1.0), "momentum=1.0 must be in \\[0, 1\\)"),
        (dict(ns_steps=0), "ns_steps=0 must be between 1 and 99"),
        (dict(lr=-1), "learning rate"),
    ],
)
def test_muon_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        optim.Muon([torch.nn.Parameter(torch.zeros(2, 2))], **kwargs)


def test_the_optim_package_stays_in_modules_a_reader_can_hold():
    """optim.py had grown to 582 lines holding every optimizer family; each family is now a module under
    300 lines, drawn in the package's docstring; a module imports only those drawn above it, and the package
    re-exports every name (``from gputrain.optim import AdamW`` still works)."""
    check_layout("gputrain.optim")
    check_exports("gputrain.optim")

"""The from-scratch autograd engine (chapter 4) against torch.autograd and finite differences.

Every op is checked on fresh random float64 inputs (no fixed seed: a new draw
each run), with a random upstream gradient so that every entry of the
Jacobian matters: relative error below 1e-8 against torch, and below 1e-6
against central finite differences.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gputrain import autograd as ag
from gputrain.autograd import Tensor

DT = torch.float64


def normal(*shape):
    return torch.randn(*shape, dtype=DT)


def positive(*shape):
    return torch.rand(*shape, dtype=DT) + 0.5


def off_zero(*shape):
    """Away from 0, so that ReLU's kink never lies within a finite-difference step."""
    return torch.sign(torch.randn(*shape, dtype=DT)) * (0.2 + torch.rand(*shape, dtype=DT))


LABELS = torch.tensor([2, 0, 4, 4, 1])

# name: (input makers, our function, torch's function)
CASES = {
    "add_broadcast": ((lambda: normal(3, 4), lambda: normal(4)), lambda a, b: a + b, lambda a, b: a + b),
    "add_broadcast_3d": ((lambda: normal(2, 1, 4), lambda: normal(3, 1)), lambda a, b: a + b, lambda a, b: a + b),
    "add_scalar": ((lambda: normal(3, 4),), lambda a: 2.5 + a, lambda a: 2.5 + a),
    "sub_outer": ((lambda: normal(3, 1), lambda: normal(1, 4)), lambda a, b: a - b, lambda a, b: a - b),
    "rsub": ((lambda: normal(3, 4),), lambda a: 1.0 - a, lambda a: 1.0 - a),
    "mul_broadcast": ((lambda: normal(2, 3, 4), lambda: normal(3, 1)), lambda a, b: a * b, lambda a, b: a * b),
    "div_broadcast": ((lambda: normal(3, 4), lambda: off_zero(4)), lambda a, b: a / b, lambda a, b: a / b),
    "rdiv": ((lambda: off_zero(3, 4),), lambda a: 2.0 / a, lambda a: 2.0 / a),
    "neg": ((lambda: normal(3, 4),), lambda a: -a, lambda a: -a),
    "pow_3": ((lambda: normal(3, 4),), lambda a: a**3, lambda a: a**3),
    "pow_half": ((lambda: positive(3, 4),), lambda a: a**0.5, lambda a: a**0.5),
    "pow_neg": ((lambda: positive(3, 4),), lambda a: a**-1.5, lambda a: a**-1.5),
    "matmul": ((lambda: normal(5, 3), lambda: normal(3, 4)), lambda a, b: a @ b, lambda a, b: a @ b),
    "matmul_batched": ((lambda: normal(2, 5, 3), lambda: normal(3, 4)), lambda a, b: a @ b, lambda a, b: a @ b),
    "matmul_broadcast_batch": (
        (lambda: normal(2, 1, 5, 3), lambda: normal(4, 3, 2)),
        lambda a, b: a @ b,
        lambda a, b: a @ b,
    ),
    "sum_all": ((lambda: normal(3, 4),), lambda a: a.sum(), lambda a: a.sum()),
    "sum_axis0": ((lambda: normal(3, 4),), lambda a: a.sum(axis=0), lambda a: a.sum(dim=0)),
    "sum_axes_keepdims": (
        (lambda: normal(2, 3, 4),),
        lambda a: a.sum(axis=(0, 2), keepdims=True),
        lambda a: a.sum(dim=(0, 2), keepdim=True),
    ),
    "mean_all": ((lambda: normal(3, 4),), lambda a: a.mean(), lambda a: a.mean()),
    "mean_axis1": ((lambda: normal(2, 3, 4),), lambda a: a.mean(axis=1), lambda a: a.mean(dim=1)),
    "mean_neg_axis_keepdims": (
        (lambda: normal(3, 4),),
        lambda a: a.mean(axis=-1, keepdims=True),
        lambda a: a.mean(dim=-1, keepdim=True),
    ),
    "reshape": (
        (lambda: normal(3, 4),),
        lambda a: a.reshape(2, 6) * a.reshape(2, 6),
        lambda a: a.reshape(2, 6) * a.reshape(2, 6),
    ),
    "transpose": ((lambda: normal(3, 4), lambda: normal(3, 5)), lambda a, b: a.T @ b, lambda a, b: a.T @ b),
    "exp": ((lambda: normal(3, 4),), lambda a: a.exp(), torch.exp),
    "log": ((lambda: positive(3, 4),), lambda a: a.log(), torch.log),
    "tanh": ((lambda: normal(3, 4),), lambda a: a.tanh(), torch.tanh),
    "sigmoid": ((lambda: normal(3, 4),), lambda a: a.sigmoid(), torch.sigmoid),
    "relu": ((lambda: off_zero(3, 4),), lambda a: a.relu(), torch.relu),
    "gelu_exact": ((lambda: 2 * normal(3, 4),), lambda a: a.gelu("none"), lambda a: F.gelu(a, approximate="none")),
    "gelu_tanh": ((lambda: 2 * normal(3, 4),), lambda a: a.gelu("tanh"), lambda a: F.gelu(a, approximate="tanh")),
    "softmax_last": ((lambda: 3 * normal(3, 5),), lambda a: a.softmax(-1), lambda a: torch.softmax(a, -1)),
    "softmax_axis0": ((lambda: 3 * normal(3, 5),), lambda a: a.softmax(0), lambda a: torch.softmax(a, 0)),
    "log_softmax": ((lambda: 3 * normal(3, 5),), lambda a: a.log_softmax(1), lambda a: torch.log_softmax(a, 1)),
    "cross_entropy": (
        (lambda: 3 * normal(5, 6),),
        lambda a: ag.cross_entropy(a, LABELS),
        lambda a: F.cross_entropy(a, LABELS),
    ),
    "reuse_in_one_expression": ((lambda: normal(3, 3),), lambda a: a * a + a @ a + a.T, lambda a: a * a + a @ a + a.T),
}


def rel_err(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return ((ours - ref).abs().max() / ref.abs().max().clamp_min(1e-300)).item()


def our_grads(fn, inputs, weight):
    leaves = [Tensor(x.clone(), requires_grad=True) for x in inputs]
    (fn(*leaves) * weight).sum().backward()
    return [leaf.grad for leaf in leaves]


@pytest.mark.parametrize("name", list(CASES))
def test_gradient_matches_torch_autograd(name):
    makers, ours, theirs = CASES[name]
    inputs = [make() for make in makers]
    ref_inputs = [x.clone().requires_grad_(True) for x in inputs]
    out = theirs(*ref_inputs)
    weight = torch.randn(out.shape, dtype=DT)  # a random upstream gradient
    ref = torch.autograd.grad((out * weight).sum(), ref_inputs)
    # forward values agree too
    torch.testing.assert_close(ours(*[Tensor(x) for x in inputs]).data, out.detach(), rtol=1e-12, atol=1e-12)
    for g, r in zip(our_grads(ours, inputs, weight), ref):
        assert g.shape == r.shape
        assert rel_err(g, r) < 1e-8, f"{name}: relative error {rel_err(g, r):.2e}"


@pytest.mark.parametrize("name", list(CASES))
def test_gradient_matches_finite_differences(name):
    makers, ours, _ = CASES[name]
    inputs = [make() for make in makers]
    weight = torch.randn(ours(*[Tensor(x) for x in inputs]).shape, dtype=DT)

    def f(xs) -> float:
        return (ours(*[Tensor(x) for x in xs]).data * weight).sum().item()

    eps = 1e-6
    for k, g in enumerate(our_grads(ours, inputs, weight)):
        fd = torch.zeros_like(inputs[k])
        for i in range(inputs[k].numel()):
            plus = [x.clone() for x in inputs]
            minus = [x.clone() for x in inputs]
            plus[k].view(-1)[i] += eps
            minus[k].view(-1)[i] -= eps
            fd.view(-1)[i] = (f(plus) - f(minus)) / (2 * eps)  # central difference: error O(eps^2)
        assert rel_err(g, fd) < 1e-6, f"{name} input {k}: relative error {rel_err(g, fd):.2e}"


def test_reused_node_accumulates_every_path():
    x = Tensor(torch.randn(4, dtype=DT), requires_grad=True)
    y = x * x  # y feeds three consumers below
    (y * 3 + y.exp() + y.sum()).sum().backward()
    xt = x.data.clone().requires_grad_(True)
    yt = xt * xt
    (yt * 3 + yt.exp() + yt.sum()).sum().backward()
    assert rel_err(x.grad, xt.grad) < 1e-12


def test_leaves_accumulate_across_calls_until_zero_grad():
    w = Tensor(torch.randn(3, 2, dtype=DT), requires_grad=True)
    x = Tensor(torch.randn(5, 3, dtype=DT))
    (x @ w).tanh().sum().backward()
    first = w.grad.clone()
    (x @ w).tanh().sum().backward()
    torch.testing.assert_close(w.grad, 2 * first)  # PyTorch semantics: gradients add up
    ag.zero_grad([w])
    assert w.grad is None
    (x @ w).tanh().sum().backward()
    torch.testing.assert_close(w.grad, first)


def test_inner_nodes_keep_their_gradient():
    a = Tensor(torch.randn(3, dtype=DT), requires_grad=True)
    h = a.sigmoid()
    (h * h).sum().backward()
    torch.testing.assert_close(h.grad, 2 * h.data)  # dL/dh for L = sum h^2


def test_topological_order_puts_inputs_first():
    a = Tensor(torch.randn(2, 2), requires_grad=True)
    b = a @ a
    c = b.exp() + b * a
    order = ag.topological_order(c)
    pos = {id(t): i for i, t in enumerate(order)}
    assert order[-1] is c and len(order) == len(pos)
    for node in order:
        assert all(pos[id(p)] < pos[id(node)] for p in node.parents)


def test_deep_graph_has_no_recursion_limit():
    x = Tensor(torch.tensor(1.0, dtype=DT), requires_grad=True)
    y = x
    for _ in range(20_000):
        y = y * 1.0001
    y.backward()
    assert abs(x.grad.item() - 1.0001**20_000) < 1e-9 * 1.0001**20_000


def test_no_graph_without_requires_grad():
    out = Tensor([1.0, 2.0]).exp() * 3
    assert not out.requires_grad and out.is_leaf


def test_numpy_and_list_inputs():
    import numpy as np

    t = Tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    (t * [1.0, 2.0, 3.0]).sum().backward()
    assert t.grad.tolist() == [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]
    assert Tensor([1, 2]).data.is_floating_point()


@pytest.mark.parametrize("activation", ag.ACTIVATIONS)
def test_mlp_gradients_match_torch_network(activation):
    x, y = torch.randn(16, 8, dtype=DT), torch.randint(0, 5, (16,))
    mlp = ag.MLP([8, 12, 12, 5], activation, generator=torch.Generator().manual_seed(1))
    loss = ag.cross_entropy(mlp(Tensor(x)), y)
    loss.backward()
    net = mlp.to_torch()
    ref = F.cross_entropy(net(x), y)
    ref.backward()
    assert abs(loss.item() - ref.item()) < 1e-12
    torch_grads = [g for lin in net if isinstance(lin, torch.nn.Linear) for g in (lin.weight.grad.T, lin.bias.grad)]
    for ours, theirs in zip(mlp.parameters(), torch_grads):
        assert rel_err(ours.grad, theirs) < 1e-8


def test_trains_digits_to_stated_accuracy():
    run = ag.train_digits(hidden=(64,), epochs=15, lr=0.1, seed=0)
    assert run.test_accuracy >= 0.93, run.test_accuracy
    assert sum(run.losses[-20:]) / 20 < 0.3 * sum(run.losses[:20]) / 20


def test_runs_in_float32_on_the_default_device():
    from gputrain.device import device

    run = ag.train_digits(hidden=(32,), epochs=3, dtype=torch.float32, device=device())
    assert run.model.parameters()[0].data.dtype == torch.float32
    assert run.test_accuracy > 0.8


# -- bad input: one clear error each ---------------------------------------------


def test_backward_on_non_scalar_needs_a_gradient():
    y = Tensor(torch.randn(3), requires_grad=True) * 2
    with pytest.raises(ValueError, match=r"non-scalar of shape \(3,\).*\.sum\(\)"):
        y.backward()
    y.backward(torch.ones(3))  # with an explicit gradient it works


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: (Tensor(torch.randn(3), requires_grad=True) * 2).backward(torch.ones(4)), "gradient has shape"),
        (lambda: Tensor(torch.randn(())).backward(), "does not require grad"),
        (lambda: Tensor(torch.randn(2, 3)) @ Tensor(torch.randn(2, 3)), "do not chain"),
        (lambda: Tensor(torch.randn(3)) @ Tensor(torch.randn(3, 1)), "reshape a vector"),
        (lambda: Tensor(torch.randn(3)).gelu("fast"), "approximate must be"),
        (lambda: Tensor(torch.randn(3)).sum(axis=2), "out of range"),
        (lambda: ag.cross_entropy(Tensor(torch.randn(4, 3)), torch.zeros(5)), "logits \\(N, C\\)"),
        (lambda: ag.MLP([4]), "sizes"),
        (lambda: ag.MLP([4, 2], activation="swish"), "activation must be"),
        (lambda: ag.sgd_step([], lr=0.0), "lr must be positive"),
    ],
)
def test_bad_input_one_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_pow_by_tensor_and_wrapping_a_tensor_are_type_errors():
    with pytest.raises(TypeError, match="exp"):
        Tensor([2.0]) ** Tensor([2.0])
    with pytest.raises(TypeError, match="detach"):
        Tensor(Tensor([1.0]))


# --- the package's layout: the Tensor, the table of rules beside it, and what is built on them ----------------


def test_the_autograd_package_stays_in_modules_a_reader_can_hold():
    """autograd.py had grown to 631 lines; the Tensor keeps the graph, the table in ops keeps the calculus."""
    from package_layout import check_chapter_reads, check_exports, check_layout

    check_layout("gputrain.autograd")
    check_exports("gputrain.autograd", namespaced=("ops",))
    check_chapter_reads("gputrain.autograd", "04_backprop.ipynb", "ag")


def test_every_operation_of_the_tensor_is_a_rule_of_the_table():
    """A method computes nothing itself: each records one rule of ops.OPS, under that rule's name."""
    x = Tensor(torch.randn(2, 3, dtype=torch.float64), requires_grad=True)
    w = Tensor(torch.randn(3, 3, dtype=torch.float64), requires_grad=True)
    made = {
        (x + 1).op,
        (x - 1).op,
        (x * 2).op,
        (x / 2).op,
        (-x).op,
        (x @ w).op,
        x.reshape(3, 2).op,
        x.T.op,
        x.sum().op,
        x.exp().op,
        x.log().op,
        x.tanh().op,
        x.sigmoid().op,
        x.relu().op,
        x.gelu().op,
        x.gelu("tanh").op,
        x.log_softmax().op,
        x.softmax().op,
    }
    assert made == set(ag.ops.OPS) - {"pow"} and (x**2).op == "pow2"
    assert all(callable(rule) and rule.__module__ == "gputrain.autograd.ops" for rule in ag.ops.OPS.values())

"""Optimizers from scratch: SGD, momentum (heavy ball and Nesterov), RMSprop, Adam, AdamW, Lion, Muon.

Chapter 5 ("Optimizers and learning rate") explains them.  Each class is a
real :class:`torch.optim.Optimizer`, so it works with ``LambdaLR``, state
dicts, hooks and any training loop; only the update rule is written out here,
one readable line per equation.  ``tests/test_optim.py`` runs each one next to
its ``torch.optim`` counterpart for 50 steps and requires the parameters to
agree within 1e-6 at every step.

Notation in the docstrings: parameters $w$, gradient $g_t$ of the loss at step
$t$ (plus $\\lambda w$ when weight decay $\\lambda$ is coupled into it),
learning rate $\\eta$.  Parameters whose ``.grad`` is ``None`` are skipped and
get no state, as in PyTorch.

The state each optimizer keeps per parameter is named as in PyTorch
(``momentum_buffer``, ``square_avg``, ``exp_avg``, ``exp_avg_sq``), so a
state dict saved by ``torch.optim`` loads here and continues identically.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Optional, Sequence

import torch
from torch.optim import Optimizer

Params = Iterable[torch.Tensor] | Iterable[dict]


# --- checks: one clear message per bad value --------------------------------------------


def _check_lr(lr: float) -> None:
    if not lr > 0:  # also rejects NaN
        raise ValueError(f"learning rate lr={lr!r} must be > 0; typical values are 1e-5 to 1e-1")


def _check_unit(name: str, value: float, hint: str = "common choices are 0.9 to 0.999") -> None:
    """A decay rate (beta, alpha, momentum, dampening) must lie in [0, 1)."""
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name}={value!r} must be in [0, 1); {hint}")


def _check_nonneg(name: str, value: float) -> None:
    if not value >= 0.0:
        raise ValueError(f"{name}={value!r} must be >= 0; use 0 to turn it off")


def _check_betas(betas: tuple[float, float]) -> None:
    if len(betas) != 2:
        raise ValueError(f"betas={betas!r} must be a pair (beta1, beta2), e.g. (0.9, 0.999)")
    _check_unit("betas[0]", betas[0])
    _check_unit("betas[1]", betas[1])


def _with_params(group: dict) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
    """The (parameter, gradient) pairs of a group, skipping parameters without a gradient."""
    for p in group["params"]:
        if p.grad is not None:
            if p.grad.is_sparse:
                raise ValueError("sparse gradients are not supported; use torch.optim.SparseAdam")
            yield p, p.grad


def _closure_loss(closure: Optional[Callable[[], float]]) -> Optional[float]:
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


# --- the optimizers ----------------------------------------------------------------------


class SGD(Optimizer):
    r"""Plain (stochastic) gradient descent: step against the gradient.

    $$g_t \leftarrow g_t + \lambda w_{t-1}, \qquad w_t = w_{t-1} - \eta\, g_t$$

    No state at all: the cheapest optimizer in memory.  Equal to
    ``torch.optim.SGD(params, lr, weight_decay=...)``.  Chapter 5.
    """

    def __init__(self, params: Params, lr: float = 1e-3, weight_decay: float = 0.0):
        _check_lr(lr)
        _check_nonneg("weight_decay", weight_decay)
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            for p, g in _with_params(group):
                if group["weight_decay"] != 0:
                    g = g.add(p, alpha=group["weight_decay"])  # L2 penalty's gradient, lambda * w
                p.add_(g, alpha=-group["lr"])
        return loss


class Momentum(Optimizer):
    r"""SGD with momentum: a heavy ball that keeps part of its velocity.

    Heavy ball (Polyak 1964), as PyTorch writes it:

    $$v_t = \mu\, v_{t-1} + (1 - \tau)\, g_t, \qquad w_t = w_{t-1} - \eta\, v_t$$

    with $v_1 = g_1$.  Nesterov's variant (Sutskever et al. 2013's form) looks
    one step ahead by using $g_t + \mu v_t$ in place of $v_t$.  Gradients that
    flip sign every step (oscillation across a narrow valley) cancel in $v$;
    gradients that agree (the gentle slope along it) add up to a step about
    $1/(1-\mu)$ times larger.  One buffer per parameter.  Equal to
    ``torch.optim.SGD(params, lr, momentum, dampening, weight_decay, nesterov)``.
    Chapter 5.
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1e-3,
        momentum: float = 0.9,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ):
        _check_lr(lr)
        _check_unit("momentum", momentum)
        _check_unit("dampening", dampening, hint="usually 0")
        _check_nonneg("weight_decay", weight_decay)
        if nesterov and (momentum == 0 or dampening != 0):
            raise ValueError("nesterov=True needs momentum > 0 and dampening = 0")
        super().__init__(
            params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov)
        )

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            mu, tau = group["momentum"], group["dampening"]
            for p, g in _with_params(group):
                if group["weight_decay"] != 0:
                    g = g.add(p, alpha=group["weight_decay"])
                state = self.state[p]
                v = state.get("momentum_buffer")
                if v is None:  # first step: the velocity starts as the gradient itself
                    v = state["momentum_buffer"] = g.clone()
                else:
                    v.mul_(mu).add_(g, alpha=1 - tau)  # v = mu v + (1 - tau) g
                direction = g.add(v, alpha=mu) if group["nesterov"] else v
                p.add_(direction, alpha=-group["lr"])
        return loss


class RMSprop(Optimizer):
    r"""RMSprop (Tieleman & Hinton 2012): divide each gradient by its recent size.

    $$s_t = \alpha\, s_{t-1} + (1-\alpha)\, g_t^2, \qquad
      w_t = w_{t-1} - \eta\, \frac{g_t}{\sqrt{s_t} + \epsilon}$$

    Steep coordinates (large $|g|$) get small steps, flat ones large steps: a
    step size per parameter.  With ``centered=True`` the running mean $\bar g$
    is subtracted, $\sqrt{s_t - \bar g_t^2}$; with ``momentum`` > 0 the scaled
    gradient feeds a velocity buffer.  One or two buffers per parameter.
    Equal to ``torch.optim.RMSprop`` with the same arguments.  Chapter 5.
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
    ):
        _check_lr(lr)
        _check_unit("alpha", alpha)
        _check_nonneg("eps", eps)
        _check_nonneg("weight_decay", weight_decay)
        _check_unit("momentum", momentum)
        super().__init__(
            params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum, centered=centered)
        )

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            alpha, eps, mu = group["alpha"], group["eps"], group["momentum"]
            for p, g in _with_params(group):
                if group["weight_decay"] != 0:
                    g = g.add(p, alpha=group["weight_decay"])
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["square_avg"] = torch.zeros_like(p)
                    if mu > 0:
                        state["momentum_buffer"] = torch.zeros_like(p)
                    if group["centered"]:
                        state["grad_avg"] = torch.zeros_like(p)
                state["step"] += 1
                s = state["square_avg"]
                s.mul_(alpha).addcmul_(g, g, value=1 - alpha)  # s = alpha s + (1 - alpha) g^2
                if group["centered"]:
                    gbar = state["grad_avg"]
                    gbar.lerp_(g, 1 - alpha)  # running mean of g
                    rms = s.addcmul(gbar, gbar, value=-1).sqrt_()  # sqrt(s - gbar^2): a std, not an RMS
                else:
                    rms = s.sqrt()
                rms.add_(eps)
                if mu > 0:
                    buf = state["momentum_buffer"]
                    buf.mul_(mu).addcdiv_(g, rms)
                    p.add_(buf, alpha=-group["lr"])
                else:
                    p.addcdiv_(g, rms, value=-group["lr"])  # w -= lr * g / (sqrt(s) + eps)
        return loss


class Adam(Optimizer):
    r"""Adam (Kingma & Ba 2015): momentum and RMSprop together, with bias correction.

    $$m_t = \beta_1 m_{t-1} + (1-\beta_1)\, g_t, \qquad
      v_t = \beta_2 v_{t-1} + (1-\beta_2)\, g_t^2$$
    $$\hat m_t = \frac{m_t}{1-\beta_1^t}, \qquad \hat v_t = \frac{v_t}{1-\beta_2^t}, \qquad
      w_t = w_{t-1} - \eta\, \frac{\hat m_t}{\sqrt{\hat v_t} + \epsilon}$$

    $m$ and $v$ start at zero, so early averages are too small; dividing by
    $1-\beta^t$ undoes that.  At $t=1$ the step is $\eta\, g/(|g|+\epsilon)$:
    every parameter moves by about $\eta$, whatever its gradient's size.
    ``weight_decay`` here is an L2 penalty added to $g_t$ (the coupled form);
    :class:`AdamW` decouples it.  Two buffers per parameter, each the size of
    the parameter: the optimizer state is twice the model.  Equal to
    ``torch.optim.Adam`` (``amsgrad=False``).  Chapter 5.
    """

    decoupled = False  # AdamW flips this: how weight decay enters is the only difference

    def __init__(
        self,
        params: Params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ):
        _check_lr(lr)
        _check_betas(betas)
        _check_nonneg("eps", eps)
        _check_nonneg("weight_decay", weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p, g in _with_params(group):
                _adam_update(p, g, self.state[p], lr, beta1, beta2, eps, wd, self.decoupled)
        return loss


def _adam_update(p, g, state: dict, lr: float, beta1: float, beta2: float, eps: float, wd: float, decoupled: bool):
    """One Adam (or, ``decoupled``, AdamW) step of parameter ``p`` with gradient ``g``; shared with :class:`Muon`."""
    if not state:
        state["step"] = 0
        state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
    state["step"] = t = int(state["step"]) + 1  # int() also accepts torch's tensor counter
    if wd != 0:
        if decoupled:
            p.mul_(1 - lr * wd)  # AdamW: shrink w directly, outside the adaptive scaling
        else:
            g = g.add(p, alpha=wd)  # Adam: L2's gradient joins g and gets rescaled with it
    m, v = state["exp_avg"], state["exp_avg_sq"]
    m.lerp_(g, 1 - beta1)  # m = beta1 m + (1 - beta1) g
    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)  # v = beta2 v + (1 - beta2) g^2
    bias1 = 1 - beta1**t
    bias2 = 1 - beta2**t
    denom = (v.sqrt() / bias2**0.5).add_(eps)  # sqrt(v_hat) + eps
    p.addcdiv_(m, denom, value=-lr / bias1)  # w -= lr * m_hat / (sqrt(v_hat) + eps)


class AdamW(Adam):
    r"""AdamW (Loshchilov & Hutter 2019): Adam with decoupled weight decay.

    $$w_{t-1} \leftarrow (1 - \eta\lambda)\, w_{t-1}, \qquad\text{then the Adam step on } g_t \text{ alone.}$$

    In :class:`Adam` the decay term $\lambda w$ is divided by $\sqrt{\hat v}$ like
    the rest of the gradient, so parameters with large gradients are barely
    decayed and the amount stops depending on $\lambda$ the way one expects.
    AdamW shrinks every weight by the same factor per step.  Equal to
    ``torch.optim.AdamW``.  Chapter 5.
    """

    decoupled = True

    def __init__(
        self,
        params: Params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)


class Lion(Optimizer):
    r"""Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"): the sign of a momentum blend.

    $$c_t = \beta_1 m_{t-1} + (1-\beta_1)\, g_t, \qquad
      w_t = w_{t-1} - \eta\,\bigl(\operatorname{sign}(c_t) + \lambda\, w_{t-1}\bigr), \qquad
      m_t = \beta_2 m_{t-1} + (1-\beta_2)\, g_t$$

    Every coordinate moves by exactly $\eta$ (plus decay), so Lion wants a
    learning rate 3-10x smaller than AdamW's and a larger weight decay.  One
    buffer per parameter (``exp_avg``): half of Adam's state.  PyTorch has no
    Lion; ``tests/test_optim.py`` checks it against the paper's update rule
    written out separately.  Chapter 5.
    """

    def __init__(
        self, params: Params, lr: float = 1e-4, betas: tuple[float, float] = (0.9, 0.99), weight_decay: float = 0.0
    ):
        _check_lr(lr)
        _check_betas(betas)
        _check_nonneg("weight_decay", weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            lr, (beta1, beta2), wd = group["lr"], group["betas"], group["weight_decay"]
            for p, g in _with_params(group):
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                m = state["exp_avg"]
                update = m.lerp(g, 1 - beta1).sign_()  # sign(beta1 m + (1 - beta1) g)
                if wd != 0:
                    p.mul_(1 - lr * wd)  # decoupled decay, as in AdamW
                p.add_(update, alpha=-lr)
                m.lerp_(g, 1 - beta2)  # m = beta2 m + (1 - beta2) g: a slower average than the step's
        return loss


# Keller Jordan's quintic: it pushes every singular value in (0, 1] towards 1 in five steps
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def newton_schulz_flops(shape: tuple[int, int], steps: int = 5) -> int:
    """FLOPs of :func:`newton_schulz` on a matrix of ``shape``: ``steps`` x (4m^2n + 2m^3), ``m <= n`` (chapter 5)."""
    m, n = sorted(shape)
    return steps * (4 * m * m * n + 2 * m**3)


def newton_schulz(
    g: torch.Tensor,
    steps: int = 5,
    coefficients: tuple[float, float, float] = NS_COEFFICIENTS,
    eps: float = 1e-7,
    dtype: Optional[torch.dtype] = torch.bfloat16,
) -> torch.Tensor:
    r"""Orthogonalise a matrix: ``g`` = $U S V^\top$ becomes about $U V^\top$, with only matrix products (chapter 5).

    The Frobenius norm bounds the largest singular value, so dividing by it
    puts every singular value in (0, 1].  Each step then applies the odd
    polynomial $p(X) = aX + b (XX^\top)X + c (XX^\top)^2 X$, which acts on
    each singular value alone,
    $\sigma \mapsto a\sigma + b\sigma^3 + c\sigma^5$,
    and leaves the singular vectors alone.  With these
    coefficients five steps land every singular value between about 0.7 and
    1.2: not exactly 1, which does no harm in training.  The work is done on
    the wide orientation (``m <= n``), whose Gram matrix $XX^\top$ is the
    smaller one: one step costs $4m^2n + 2m^3$ FLOPs.  ``dtype``: the format of
    the products (bfloat16, as in Keller Jordan's code and ``torch.optim.Muon``;
    ``None`` keeps ``g``'s).
    """
    if g.dim() != 2:
        raise ValueError(f"newton_schulz orthogonalises a matrix; got a tensor of shape {tuple(g.shape)}")
    a, b, c = coefficients
    x = g.to(dtype or g.dtype)
    tall = g.size(0) > g.size(1)
    if tall:
        x = x.mT  # (m, n) with m <= n
    x = x / x.norm().clamp(min=eps)  # every singular value now <= 1
    for _ in range(steps):
        gram = x @ x.mT  # (m, m): X X^T
        poly = torch.addmm(gram, gram, gram, beta=b, alpha=c)  # b A + c A^2, A = X X^T
        x = torch.addmm(x, poly, x, beta=a)  # a X + (b A + c A^2) X
    return x.mT if tall else x


def uses_muon(p: torch.Tensor, group: dict) -> bool:
    """Whether :class:`Muon` orthogonalises ``p``: matrices, except lookup tables (embeddings, the tied head).

    A group may decide for all its parameters with ``"use_muon": True/False``.
    :class:`gputrain.model.GPT` marks its embedding tables with
    ``lookup_table = True``: a row of an embedding is read for one token, not
    multiplied with an input, so the argument for orthogonal updates does not
    apply to it (Jordan et al.; Moonlight keeps embeddings and head on AdamW).
    """
    if group.get("use_muon") is not None:
        return bool(group["use_muon"])
    return p.dim() == 2 and not getattr(p, "lookup_table", False)


class Muon(Optimizer):
    r"""Muon (Jordan et al. 2024): momentum, orthogonalised, for the weight matrices; AdamW for the rest.

    For each weight matrix, with momentum $\mu$ and Nesterov's look-ahead (as ``torch.optim.Muon``):

    $$B_t = \mu B_{t-1} + (1-\mu) G_t, \qquad
      O_t = \mathrm{NS}_5\bigl((1-\mu) G_t + \mu B_t\bigr), \qquad
      W_t = (1 - \eta\lambda) W_{t-1} - \eta\, s\, O_t$$

    $\mathrm{NS}_5$ is :func:`newton_schulz`: the update keeps the momentum's
    singular vectors and sets its singular values to about 1, so every
    direction of the matrix moves by the same amount, the large ones no more
    than the small ones.  $s$ depends on the shape $A \times B$:
    ``adjust_lr="original"`` (Keller Jordan's) is $\sqrt{\max(1, A/B)}$;
    ``"match_rms_adamw"`` (Moonlight, Liu et al. 2025) is
    $0.2\sqrt{\max(A, B)}$, which gives the update the size of an AdamW update,
    so Muon can share AdamW's learning rate.  Every other parameter (vectors,
    and the tables :func:`uses_muon` turns away) takes an AdamW step with
    ``betas`` and ``eps`` at the same ``lr``.  State: one buffer per matrix
    (``momentum_buffer``), against AdamW's two.  ``ns_dtype=None`` runs the
    products in bfloat16 on a GPU and in the parameters' format elsewhere
    (CPUs without native bf16 would convert every operand in software).
    Equal, step by step, to ``torch.optim.Muon`` on the matrices next to
    ``torch.optim.AdamW`` on the rest (``tests/test_optim.py``).  Chapter 5.
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_steps: int = 5,
        ns_coefficients: tuple[float, float, float] = NS_COEFFICIENTS,
        eps: float = 1e-7,
        adjust_lr: str = "original",
        ns_dtype: "torch.dtype | str | None" = torch.bfloat16,
        betas: tuple[float, float] = (0.9, 0.95),
        adamw_eps: float = 1e-8,
    ):
        _check_lr(lr)
        _check_nonneg("weight_decay", weight_decay)
        _check_unit("momentum", momentum, hint="Muon uses 0.95")
        _check_betas(betas)
        _check_nonneg("adamw_eps", adamw_eps)
        if adjust_lr not in MUON_LR_ADJUSTMENTS:
            raise ValueError(f"adjust_lr={adjust_lr!r} is not one of: {', '.join(MUON_LR_ADJUSTMENTS)}")
        if ns_dtype is not None:  # kept by name: param_groups go into JSON checkpoints
            ns_dtype = str(ns_dtype).removeprefix("torch.")
            if not isinstance(getattr(torch, ns_dtype, None), torch.dtype):
                raise ValueError(f"ns_dtype={ns_dtype!r} is not a torch dtype; use 'bfloat16', 'float32' or None")
        if not 1 <= ns_steps < 100:
            raise ValueError(f"ns_steps={ns_steps!r} must be between 1 and 99; Muon uses 5")
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps,
                        ns_coefficients=tuple(ns_coefficients), eps=eps, adjust_lr=adjust_lr, ns_dtype=ns_dtype,
                        betas=tuple(betas), adamw_eps=adamw_eps)  # fmt: skip
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            lr, wd, mu = group["lr"], group["weight_decay"], group["momentum"]
            for p, g in _with_params(group):
                state = self.state[p]
                if not uses_muon(p, group):
                    beta1, beta2 = group["betas"]
                    _adam_update(p, g, state, lr, beta1, beta2, group["adamw_eps"], wd, decoupled=True)
                    continue
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                buf = state["momentum_buffer"]
                buf.lerp_(g, 1 - mu)  # B = mu B + (1 - mu) G
                update = g.lerp(buf, mu) if group["nesterov"] else buf  # look ahead: (1 - mu) G + mu B
                dtype = (
                    getattr(torch, group["ns_dtype"]) if group["ns_dtype"] else (torch.bfloat16 if p.is_cuda else None)
                )
                ortho = newton_schulz(update, group["ns_steps"], group["ns_coefficients"], group["eps"], dtype)
                p.mul_(1 - lr * wd)  # decoupled weight decay, as in AdamW
                p.add_(ortho, alpha=-lr * MUON_LR_ADJUSTMENTS[group["adjust_lr"]](*p.shape))
        return loss


# the scale s of Muon's step for an A x B matrix
MUON_LR_ADJUSTMENTS: dict[str, Callable[[int, int], float]] = {
    "original": lambda A, B: math.sqrt(max(1, A / B)),  # Keller Jordan's
    "match_rms_adamw": lambda A, B: 0.2 * math.sqrt(max(A, B)),  # Moonlight's: an AdamW-sized step
}


def state_bytes(optimizer: Optimizer) -> int:
    """Bytes held by the optimizer's state tensors (``state_dict()["state"]``).  Chapter 5.

    Plain SGD holds 0, momentum and RMSprop one buffer per parameter, Adam two:
    in fp32 that is 8 bytes per parameter on top of the model's 4.
    """
    total = 0
    for per_param in optimizer.state_dict()["state"].values():
        for value in per_param.values():
            if torch.is_tensor(value):
                total += value.numel() * value.element_size()
    return total


# --- experiments on small surfaces (chapter 5) --------------------------------------------


def descend(
    loss_fn: Callable[[torch.Tensor], torch.Tensor],
    start: Sequence[float],
    make_optimizer: Callable[[list[dict]], Optimizer],
    lrs: Sequence[float],
    steps: int,
    grad_noise: float = 0.0,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run an optimizer from ``start`` once per learning rate, all runs side by side.  Chapter 5.

    ``loss_fn`` maps a batch of points ``(n, D)`` to their losses ``(n,)``;
    each learning rate gets its own point and its own parameter group, so one
    backward pass serves every run.  ``grad_noise`` adds Gaussian noise of that
    standard deviation to each gradient (a stand-in for mini-batch noise).
    Returns the paths ``(steps + 1, n, D)`` and losses ``(steps + 1, n)``, in float64.
    """
    points = [torch.tensor(list(start), dtype=torch.float64, requires_grad=True) for _ in lrs]
    opt = make_optimizer([{"params": [p], "lr": lr} for p, lr in zip(points, lrs)])
    gen = torch.Generator().manual_seed(seed)
    paths = torch.empty(steps + 1, len(lrs), len(points[0]), dtype=torch.float64)  # (S+1, n, D)
    losses = torch.empty(steps + 1, len(lrs), dtype=torch.float64)  # (S+1, n)
    for k in range(steps + 1):
        w = torch.stack(points)  # (n, D)
        loss = loss_fn(w)  # (n,)
        paths[k], losses[k] = w.detach(), loss.detach()
        if k == steps:
            break
        opt.zero_grad()
        loss.sum().backward()  # the runs do not interact: each point's gradient is its own loss's
        if grad_noise:
            for p in points:
                p.grad.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype), alpha=grad_noise)
        opt.step()
    return paths, losses


def steps_to(losses: torch.Tensor, tol: float) -> list[Optional[int]]:
    """Per run (column of ``losses``), the first step from which the loss stays below ``tol``.

    ``None`` for a run that never settles below it (too slow, or diverged to inf/NaN).
    Chapter 5.
    """
    below = torch.isfinite(losses) & (losses < tol)  # (S+1, n)
    stays = below.flip(0).cumprod(0).flip(0).bool()  # below now and at every later step
    return [int(col.nonzero()[0]) if col.any() else None for col in stays.T]


__all__ = [
    "SGD",
    "Momentum",
    "RMSprop",
    "Adam",
    "AdamW",
    "Lion",
    "Muon",
    "newton_schulz",
    "newton_schulz_flops",
    "uses_muon",
    "state_bytes",
    "descend",
    "steps_to",
]

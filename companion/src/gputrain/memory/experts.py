"""Mixture-of-experts shapes and their memory under expert parallelism (chapter 9).

A :class:`MoEShape` groups an MoE decoder's parameters by where expert
parallelism puts them: routed experts split over the EP ranks, everything else
replicated.  :func:`stage_params` cuts a shape into pipeline stages and
:func:`expert_parallel_memory` gives the bytes one GPU holds; the layout
planner (:mod:`gputrain.parallel.planner`) reads both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..moe import DEEPSEEK_V3, deepseek_v3_params, moe_layer_params
from .recipes import PrecisionRecipe, get_recipe, optimizer_states


@dataclass(frozen=True, kw_only=True)
class MoEShape:
    """A mixture-of-experts decoder's parameters, grouped by where expert parallelism puts them (chapter 9).

    *Routed* experts are split over the EP ranks; everything else (attention,
    norms, routers, shared experts, dense blocks, embeddings) is *replicated*
    on every data-parallel rank.  The attribute names of the shape
    (``n_layer``, ``n_embd``, ...) are those of ``GPTConfig``, so the layout
    planner reads either.  Build one with :func:`moe_shape` (our GPT) or
    :func:`deepseek_v3_shape`.
    """

    name: str = "MoE"
    n_layer: int  # main-model blocks L
    n_embd: int  # hidden width C
    n_head: int  # attention heads
    vocab_size: int
    block_size: int  # training sequence length
    moe_layers: tuple[bool, ...]  # which blocks are MoE
    dense_layer: int  # parameters of one dense block
    moe_replicated: int  # parameters of one MoE block outside its routed experts
    expert: int  # parameters of one routed expert
    n_experts: int  # routed experts E per MoE block
    top_k: int  # routed experts per token
    embedding: int  # parameters before the first block (token and position embeddings)
    head: int  # parameters after the last block (final norm; an untied output head)
    tied: bool = True  # head tied to the embedding (then the embedding does the head's arithmetic)
    extra_last: int = 0  # replicated parameters of modules after the head (DeepSeek-V3's MTP module)
    extra_last_moe: int = 0  # MoE blocks in those modules
    attn_width: int = 0  # width of q·k and a·v per token for FLOPs (0: n_embd)

    def __post_init__(self) -> None:
        if len(self.moe_layers) != self.n_layer:
            raise ValueError(f"moe_layers has {len(self.moe_layers)} entries for {self.n_layer} layers")
        if not 1 <= self.top_k <= self.n_experts:
            raise ValueError(f"top_k={self.top_k} must be between 1 and n_experts={self.n_experts}")

    def layer(self, i: int) -> tuple[int, int]:
        """(replicated, routed) parameters of block ``i``."""
        if self.moe_layers[i]:
            return self.moe_replicated, self.n_experts * self.expert
        return self.dense_layer, 0

    @property
    def routed(self) -> int:
        """Parameters of every routed expert (main model and extra modules)."""
        return (sum(self.moe_layers) + self.extra_last_moe) * self.n_experts * self.expert

    @property
    def params(self) -> int:
        moe_extra = self.extra_last_moe * (self.moe_replicated + self.n_experts * self.expert)
        return (
            self.embedding
            + self.head
            + sum(sum(self.layer(i)) for i in range(self.n_layer))
            + self.extra_last
            + moe_extra
        )

    @property
    def active(self) -> int:
        """Parameters that do arithmetic for one token: top_k routed experts per MoE block; no lookup table."""
        idle = (sum(self.moe_layers) + self.extra_last_moe) * (self.n_experts - self.top_k) * self.expert
        return self.params - idle - (0 if self.tied else self.embedding)


def moe_shape(cfg) -> MoEShape:
    """The :class:`MoEShape` of a :class:`gputrain.model.GPT` built from ``cfg`` (a GPTConfig with ``n_experts``)."""
    if not getattr(cfg, "n_experts", 0):
        raise ValueError("moe_shape needs a GPTConfig with n_experts > 0; dense models use shape_of")
    C, mcfg = cfg.n_embd, cfg.moe_config()
    dense = 12 * C * C + (13 * C if cfg.bias else 2 * C)
    expert = 2 * C * mcfg.expert_hidden + ((mcfg.expert_hidden + C) if cfg.bias else 0)
    moe_total, _ = moe_layer_params(mcfg)
    mlp = 8 * C * C + (5 * C if cfg.bias else 0)  # the dense MLP an MoE block replaces
    return MoEShape(
        name="MoE GPT",
        n_layer=cfg.n_layer,
        n_embd=C,
        n_head=cfg.n_head,
        vocab_size=cfg.vocab_size,
        block_size=cfg.block_size,
        moe_layers=tuple(cfg.is_moe_layer(i) for i in range(cfg.n_layer)),
        dense_layer=dense,
        moe_replicated=dense - mlp + moe_total - mcfg.n_experts * expert,
        expert=expert,
        n_experts=mcfg.n_experts,
        top_k=mcfg.top_k,
        embedding=(cfg.vocab_size + cfg.block_size) * C,
        head=2 * C if cfg.bias else C,
    )


def deepseek_v3_shape(config: Optional[dict] = None, seq_len: int = 4096) -> MoEShape:
    """DeepSeek-V3 as a :class:`MoEShape`, every count taken from :func:`gputrain.moe.deepseek_v3_params`.

    The per-block counts are differences of that function on shortened
    configurations (0 or 1 layers), so the totals agree with it exactly; the
    multi-token-prediction module (one MoE block plus a projection) sits after
    the head, on the last pipeline stage, as in the report.
    """
    c = dict(DEEPSEEK_V3 if config is None else config)
    count = lambda **kw: deepseek_v3_params(dict(c, **kw))["total"]  # noqa: E731
    base = count(n_layers=0, first_dense=0)  # embedding, head, final norm
    dense, moe_block = count(n_layers=1, first_dense=1) - base, count(n_layers=1, first_dense=0) - base
    h, E = c["hidden"], c["n_routed"]
    expert = 3 * h * c["expert_ffn"]  # SwiGLU: gate, up, down
    mtp = deepseek_v3_params(c)["mtp"]
    return MoEShape(
        name="DeepSeek-V3",
        n_layer=c["n_layers"],
        n_embd=h,
        n_head=c["n_heads"],
        vocab_size=c["vocab"],
        block_size=seq_len,
        moe_layers=tuple(i >= c["first_dense"] for i in range(c["n_layers"])),
        dense_layer=dense,
        moe_replicated=moe_block - E * expert,
        expert=expert,
        n_experts=E,
        top_k=c["top_k"],
        embedding=c["vocab"] * h,
        head=base - c["vocab"] * h,
        tied=False,
        extra_last=c["mtp_modules"] * (mtp - moe_block),
        extra_last_moe=c["mtp_modules"],
        attn_width=c["n_heads"] * (c["qk_nope_head_dim"] + c["qk_rope_head_dim"] + c["v_head_dim"]) // 2,
    )


def stage_params(shape: MoEShape, pp: int = 1, stage: int = 0) -> dict[str, int]:
    """Replicated and routed parameters, and MoE blocks, of pipeline ``stage`` of ``pp`` (layers split evenly)."""
    if not 1 <= pp <= shape.n_layer or not 0 <= stage < pp:
        raise ValueError(f"need 1 <= pp <= {shape.n_layer} layers and 0 <= stage < pp; got pp={pp}, stage={stage}")
    base, extra = divmod(shape.n_layer, pp)  # the first `extra` stages get one layer more
    start = stage * base + min(stage, extra)
    layers = range(start, start + base + (stage < extra))
    replicated = sum(shape.layer(i)[0] for i in layers) + (shape.embedding if stage == 0 else 0)
    routed = sum(shape.layer(i)[1] for i in layers)
    n_moe = sum(shape.moe_layers[i] for i in layers)
    if stage == pp - 1:  # the head and the extra (MTP) modules live with the last block
        replicated += shape.head + shape.extra_last + shape.extra_last_moe * shape.moe_replicated
        routed += shape.extra_last_moe * shape.n_experts * shape.expert
        n_moe += shape.extra_last_moe
    return {"replicated": replicated, "routed": routed, "layers": len(layers), "moe_layers": n_moe}


def _states(params: float, recipe: PrecisionRecipe, n_states: int, zero_stage: int, shards: int) -> tuple:
    """(weights, gradients, master + optimizer states) bytes of ``params`` under ZeRO over ``shards`` ranks."""
    shard = {k: (shards if zero_stage >= k else 1) for k in (1, 2, 3)}
    optim = params * (recipe.master + n_states * recipe.optimizer_state) / shard[1]
    return params * recipe.weights / shard[3], params * recipe.grads / shard[2], optim


def _check_layout(shape: MoEShape, *, ep: int, dp: int, tp: int, in_flight: int, zero_stage: int, tokens: int) -> None:
    """Refuse a layout :func:`expert_parallel_memory` cannot mean, with one line naming the fix."""
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage!r}")
    if tokens < 0:
        raise ValueError(f"tokens must be >= 0, got {tokens}")
    for name, value in (("ep", ep), ("dp", dp), ("tp", tp), ("in_flight", in_flight)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if shape.n_experts % ep:
        raise ValueError(
            f"{shape.n_experts} experts do not split evenly over EP{ep}; "
            f"use an EP degree that divides {shape.n_experts}"
        )
    if dp % ep:
        raise ValueError(
            f"EP{ep} does not divide DP{dp}: expert-parallel ranks are carved out of the "
            "data-parallel ranks; pick an EP degree that divides the DP degree"
        )


def expert_parallel_memory(
    shape: MoEShape,
    *,
    ep: int = 1,
    dp: int = 1,
    pp: int = 1,
    stage: int = 0,
    tp: int = 1,
    zero_stage: int = 1,
    precision: "str | PrecisionRecipe" = "bf16-mixed",
    optimizer: str = "adam",
    tokens: int = 0,
    in_flight: int = 1,
    a2a_bytes: Optional[float] = None,
    activation_bytes: float = 0.0,
) -> dict[str, float]:
    """Bytes per GPU of an MoE model under expert x data x pipeline (x tensor) parallelism (chapter 9).

    ``dp`` data-parallel ranks hold each pipeline stage; ``ep`` of them (EP
    ranks are carved out of the DP ranks, as in DeepSeek-V3) split each MoE
    block's routed experts, so a GPU holds ``E / ep`` experts and the same
    experts recur on ``dp / ep`` ranks.  ZeRO shards the replicated part's
    states over ``dp`` and the experts' over ``dp / ep``.  Everything is divided
    by ``tp``.  ``tokens``: tokens a GPU routes per micro-batch; each MoE block
    keeps a dispatch buffer (the N·k rows it received) and a combine buffer
    (the N·k rows it sent back), ``a2a_bytes`` per value (default: the
    recipe's activation bytes), for ``in_flight`` micro-batches.
    ``activation_bytes``: every other saved activation, bytes per token per block.
    """
    recipe, n_states = get_recipe(precision), optimizer_states(optimizer)
    _check_layout(shape, ep=ep, dp=dp, tp=tp, in_flight=in_flight, zero_stage=zero_stage, tokens=tokens)
    part = stage_params(shape, pp, stage)
    rep = _states(part["replicated"] / tp, recipe, n_states, zero_stage, dp)
    exp = _states(part["routed"] / (ep * tp), recipe, n_states, zero_stage, dp // ep)
    a2a = recipe.activations if a2a_bytes is None else a2a_bytes
    buffers = 2 * tokens * shape.top_k * shape.n_embd * a2a * part["moe_layers"] * in_flight / tp
    return {
        "replicated weights": rep[0],
        "replicated gradients": rep[1],
        "replicated optimizer": rep[2],
        "expert weights": exp[0],
        "expert gradients": exp[1],
        "expert optimizer": exp[2],
        "all-to-all buffers": buffers,
        "activations": activation_bytes * tokens * part["layers"] * in_flight,
    }

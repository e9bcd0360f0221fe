"""Parameters of a mixture of experts: total versus active per token, and DeepSeek-V3's (chapter 9)."""

from __future__ import annotations

import torch.nn as nn

from .config import MoEConfig
from .layer import MoE


def count_moe_params(model: nn.Module) -> tuple[int, int]:
    """(total, active per token) counted from the modules of ``model``.

    Active = every parameter except the routed experts a token does not use:
    in each MoE layer only ``top_k`` of the ``n_experts`` routed experts run.
    """
    total = sum(p.numel() for p in model.parameters())
    idle = 0
    for m in model.modules():
        if isinstance(m, MoE):
            routed = sum(p.numel() for p in m.experts.parameters())
            idle += routed - routed * m.cfg.top_k // m.cfg.n_experts
    return total, total - idle


def moe_layer_params(cfg: MoEConfig) -> tuple[int, int]:
    """Closed-form (total, active) parameters of one :class:`MoE` layer.

    Router ``E*C``; each expert ``2*C*h`` weights plus ``h + C`` biases when
    ``bias``; ``E + S`` experts in total, ``k + S`` of them active.
    """
    C, h = cfg.dim, cfg.expert_hidden
    expert = 2 * C * h + ((h + C) if cfg.bias else 0)
    router = cfg.n_experts * C
    return (router + (cfg.n_experts + cfg.n_shared) * expert, router + (cfg.top_k + cfg.n_shared) * expert)


# DeepSeek-V3's published configuration (config.json of deepseek-ai/DeepSeek-V3; report arXiv 2412.19437)
DEEPSEEK_V3 = dict(
    n_layers=61,
    first_dense=3,
    hidden=7168,
    n_heads=128,
    q_lora_rank=1536,
    kv_lora_rank=512,
    qk_nope_head_dim=128,
    qk_rope_head_dim=64,
    v_head_dim=128,
    dense_ffn=18432,
    expert_ffn=2048,
    n_routed=256,
    n_shared=1,
    top_k=8,
    vocab=129280,
    mtp_modules=1,
)


def deepseek_v3_params(c: dict = DEEPSEEK_V3) -> dict[str, int]:
    """DeepSeek-V3's parameter counts from its published configuration (chapter 9).

    Counted: MLA attention (the q down/up projections with the q-LoRA RMSNorm,
    the joint kv down-projection with the decoupled RoPE key, its RMSNorm, the kv
    up-projection, the output projection), two RMSNorms per layer, SwiGLU FFNs
    (three matrices: gate, up, down; no biases), the router's weights and its
    per-expert score-correction bias, the input embedding and the untied output
    head, the final norm.

    * ``total`` (~671 B): the main model, 61 layers (3 dense, 58 MoE).
    * ``active`` (~37 B; 36.6 B in DeepSeek's own breakdown): per token, with
      8 routed + 1 shared experts per MoE layer and the output head, but not
      the embedding table (a lookup reads one row and does no arithmetic).
    * ``mtp`` (~11.6 B): the multi-token-prediction module's own parameters
      (two RMSNorms, a 2h -> h projection, one MoE layer, a norm; it shares the
      embedding and the head with the main model).
    * ``with_mtp_stored`` (~685 B): the size of the published checkpoint, which
      stores the MTP module with its own copies of the embedding and the head.
    """
    h, H = c["hidden"], c["n_heads"]
    attn = (
        h * c["q_lora_rank"]
        + c["q_lora_rank"]
        + c["q_lora_rank"] * H * (c["qk_nope_head_dim"] + c["qk_rope_head_dim"])
        + h * (c["kv_lora_rank"] + c["qk_rope_head_dim"])
        + c["kv_lora_rank"]
        + c["kv_lora_rank"] * H * (c["qk_nope_head_dim"] + c["v_head_dim"])
        + H * c["v_head_dim"] * h
    )
    swiglu = 3 * h * c["expert_ffn"]
    router = h * c["n_routed"] + c["n_routed"]
    dense = attn + 2 * h + 3 * h * c["dense_ffn"]
    moe_total = attn + 2 * h + router + (c["n_routed"] + c["n_shared"]) * swiglu
    moe_active = attn + 2 * h + router + (c["top_k"] + c["n_shared"]) * swiglu
    n_moe = c["n_layers"] - c["first_dense"]
    emb = c["vocab"] * h
    total = 2 * emb + h + c["first_dense"] * dense + n_moe * moe_total
    active = emb + h + c["first_dense"] * dense + n_moe * moe_active  # head, not the embedding lookup
    mtp = c["mtp_modules"] * (2 * h + 2 * h * h + moe_total + h)
    return {"total": total, "active": active, "mtp": mtp, "with_mtp_stored": total + mtp + 2 * emb * c["mtp_modules"]}

"""The shape of a GPT: :class:`GPTConfig`, the one dataclass every block reads (chapter 2).

Its mixture-of-experts fields become a :class:`gputrain.moe.MoEConfig` (chapter 9).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import moe

ATTENTIONS = ("sdpa", "flash-triton")  # GPTConfig.attention: torch's SDPA, or gputrain.kernels.flash_attention


@dataclass(kw_only=True)
class GPTConfig:
    vocab_size: int = 256  # tokens the model can read and predict
    block_size: int = 128  # longest context (positions) the model can see
    n_layer: int = 4  # transformer blocks
    n_head: int = 4  # attention heads per block
    n_embd: int = 128  # width C of the residual stream
    dropout: float = 0.0  # dropout probability in attention and MLP outputs
    bias: bool = True  # biases in Linear and LayerNorm layers (GPT-2 has them)
    attention: str = "sdpa"  # "sdpa" (torch's fused attention) or "flash-triton" (chapter 11's kernel, no dropout)
    tie_embeddings: bool = True  # the output head reuses the token embedding matrix (GPT-2); False: its own
    # mixture of experts (chapter 9); n_experts=0 keeps every block dense
    n_experts: int = 0  # routed experts per MoE block
    n_shared_experts: int = 1  # always-on shared experts per MoE block
    top_k: int = 2  # routed experts each token uses
    expert_hidden: int = 0  # hidden width of one expert; 0: 4C // (top_k + n_shared_experts), dense-sized
    router: str = "sigmoid"  # "sigmoid" (DeepSeek-V3) or "softmax" (Switch/GShard)
    routed_scaling: float = 1.0  # sigmoid router: gate multiplier after normalization
    capacity_factor: float | None = None  # None: dropless; else each expert takes ceil(cf*N*k/E)
    balance: str = "bias"  # "none", "aux" (auxiliary loss) or "bias" (aux-loss-free)
    aux_loss_weight: float = 0.01  # alpha of the auxiliary balance loss
    bias_gamma: float = 1e-3  # step of the aux-loss-free bias (moe.update_router_biases)
    moe_first_dense: int = 0  # the first blocks stay dense (DeepSeek-V3: 3)
    moe_every: int = 1  # after those, every moe_every-th block is MoE
    n_expert_groups: int = 1  # node-limited routing: expert groups ("nodes")
    topk_expert_groups: int = 1  # groups a token may use

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            if getattr(self, name) < 1:
                raise ValueError(f"GPTConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.n_embd % self.n_head:
            raise ValueError(
                f"GPTConfig.n_embd={self.n_embd} is not divisible by n_head={self.n_head}; "
                "pick n_embd as a multiple of n_head"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"GPTConfig.dropout must be in [0, 1), got {self.dropout}")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"GPTConfig.attention must be one of {ATTENTIONS}, got {self.attention!r}")
        if self.attention == "flash-triton" and self.dropout:
            raise ValueError("GPTConfig.attention='flash-triton' has no dropout; set dropout=0 or use 'sdpa'")
        if self.n_experts < 0 or self.moe_every < 1 or self.moe_first_dense < 0:
            raise ValueError(
                "GPTConfig needs n_experts >= 0 (0: dense), moe_every >= 1, moe_first_dense >= 0; "
                f"got {self.n_experts}, {self.moe_every}, {self.moe_first_dense}"
            )
        if self.n_experts:
            self.moe_config()  # validates top_k, router, balance, capacity_factor, groups

    def moe_config(self) -> "moe.MoEConfig":
        """The :class:`gputrain.moe.MoEConfig` of this model's MoE blocks."""
        hidden = self.expert_hidden or 4 * self.n_embd // (self.top_k + self.n_shared_experts)
        return moe.MoEConfig(
            dim=self.n_embd,
            n_experts=self.n_experts,
            top_k=self.top_k,
            expert_hidden=hidden,
            n_shared=self.n_shared_experts,
            router=self.router,
            routed_scaling=self.routed_scaling,
            capacity_factor=self.capacity_factor,
            balance=self.balance,
            aux_loss_weight=self.aux_loss_weight,
            bias_gamma=self.bias_gamma,
            n_groups=self.n_expert_groups,
            topk_groups=self.topk_expert_groups,
            bias=self.bias,
        )

    def is_moe_layer(self, layer: int) -> bool:
        """Whether block ``layer`` (0-based) has a mixture of experts instead of a dense MLP."""
        return (
            self.n_experts > 0
            and layer >= self.moe_first_dense
            and (layer - self.moe_first_dense) % self.moe_every == 0
        )

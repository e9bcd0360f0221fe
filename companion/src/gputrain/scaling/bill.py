"""The bill (chapter 14): published training runs turned into FLOPs, implied MFU and money.

The figures are the reports' own, each with its BibTeX key:

* DeepSeek-V3: 14.8 T pre-training tokens, 37 B parameters active per token
  (671 B in all), 2.788 M H800 GPU-hours in all, 2.664 M of them
  pre-training, priced at an assumed 2 US dollars per GPU-hour (``deepseek2024``);
* Llama 3.1 405B: 405 B dense parameters, 15.6 T tokens (``dubey2024``),
  30.84 M H100 GPU-hours (the model card, ``meta2024llama31``);
* a CPU's price: AWS's documented example of an 8-vCPU c5.2xlarge at 0.34 US
  dollars per On-Demand hour, 0.0425 per vCPU-hour (``aws2024spot``); one
  training thread is one vCPU.

FLOPs follow the ``6 N D`` rule with N the parameters a token uses; the
attention term is left out (the reports do not give the shapes it needs
alongside their counts), so the implied MFU is a lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass

SECONDS_PER_HOUR = 3600.0
GPU_HOUR_PRICE = 2.0  # US$ per GPU-hour, DeepSeek-V3's own assumption (deepseek2024), used for every GPU here
VCPU_HOUR_PRICE = 0.34 / 8  # US$ per vCPU-hour: AWS's c5.2xlarge example, $0.34 an hour for 8 vCPUs (aws2024spot)


@dataclass(frozen=True)
class TrainingRun:
    """A published training run: what it trained, for how long, on what."""

    name: str
    params: float  # parameters each token uses (active parameters for a mixture of experts)
    tokens: float  # pre-training tokens
    gpu_hours: float  # GPU-hours the report gives for the whole training
    gpu: str  # the card, a key of gputrain.device.GPU_SPECS
    sources: tuple[str, ...]
    pretrain_hours: float = 0.0  # the pre-training share of gpu_hours, where the report splits it (0: not split)
    total_params: float = 0.0  # all parameters (for a mixture of experts), 0 when equal to params

    @property
    def flops(self) -> float:
        """Training FLOPs by the ``6 N D`` rule."""
        return 6 * self.params * self.tokens

    def implied_mfu(self, peak: float, hours: float | None = None) -> float:
        """The model FLOPs utilization the GPU-hours imply at ``peak`` FLOP/s per GPU."""
        hours = hours or self.gpu_hours
        if not (peak > 0 and hours > 0):
            raise ValueError("peak and hours must be positive")
        return self.flops / (hours * SECONDS_PER_HOUR * peak)

    def cost(self, price: float = GPU_HOUR_PRICE) -> float:
        """US dollars at ``price`` per GPU-hour for all the reported hours."""
        return self.gpu_hours * price


DEEPSEEK_V3 = TrainingRun(
    name="DeepSeek-V3", params=37e9, tokens=14.8e12, gpu_hours=2.788e6, gpu="H800",
    sources=("deepseek2024",), pretrain_hours=2.664e6, total_params=671e9,
)  # fmt: skip
LLAMA_31_405B = TrainingRun(
    name="Llama 3.1 405B", params=405e9, tokens=15.6e12, gpu_hours=30.84e6, gpu="H100",
    sources=("dubey2024", "meta2024llama31"),
)  # fmt: skip


def dollars_per_million_tokens(tokens_per_s: float, price_per_hour: float) -> float:
    """US dollars to train on a million tokens at ``tokens_per_s`` on hardware rented at ``price_per_hour``."""
    if not (tokens_per_s > 0 and price_per_hour > 0):
        raise ValueError("tokens_per_s and price_per_hour must be positive")
    return price_per_hour / (tokens_per_s * SECONDS_PER_HOUR) * 1e6


def dollars_per_exaflop(flops_per_s: float, price_per_hour: float) -> float:
    """US dollars per 10^18 FLOPs of training arithmetic at a sustained ``flops_per_s``."""
    if not (flops_per_s > 0 and price_per_hour > 0):
        raise ValueError("flops_per_s and price_per_hour must be positive")
    return price_per_hour / (flops_per_s * SECONDS_PER_HOUR) * 1e18

"""The speed ladder: one GPT trained faster and faster, one change at a time (appendix "Making it fast").

Every rung keeps what the rungs before it switched on and adds one thing:

====  ===========  ==================================================================
 1    fp32         float32 everywhere, a hand-written attention, AdamW's default step
 2    tf32         float32 matrix products on TF32 tensor cores (NVIDIA GPUs only)
 3    fused_adamw  AdamW's whole update in one fused kernel instead of one per operation
 4    bf16         bfloat16 autocast: matrix products in BF16, weights kept in FP32
 5    sdpa         ``F.scaled_dot_product_attention`` (flash attention) replaces it
 6    compile      ``torch.compile``: fused element-wise kernels, fewer launches
 7    batch        a larger batch: more work per launch and per optimizer step
 8    pad_vocab    the vocabulary padded to a multiple of 64 (50257 -> 50304)
====  ===========  ==================================================================

One exception keeps the later rungs honest: a rung that this machine can only
emulate (bf16 on a CPU without native bf16 products, measured once by
:func:`gputrain.speed.native_bf16`) is measured and reported, but the rungs
after it build on the rung before it, so its slowdown does not hide what they
do.  Each row names the rung it builds on.

Same model (same seed, same shape), same data (the same batches in the same
order), and the rungs are timed in alternating rounds (rung 1, 2, ..., 8,
then again), so a neighbour's burst of load slows every rung a little instead
of one rung a lot; each rung reports its median round.  ``gputrain bench``
runs it from the command line.

One mechanism per module.  Imports go one way, down this list: a module may
import those above it, never one below::

    config     RUNGS, LadderConfig, the cpu and gpu presets, padded_vocab
       |
    attention  HandWrittenAttention, the layer the SDPA rung replaces  (imports gputrain.model)
       |
    rung       Recipe, skip reasons, Batches, Rung: one rung's model and step
    result     LadderResult and its text table                          (imports no sibling)
       |
    ladder     run_ladder, plan: warm-ups, alternating rounds, the time cap

Every name is re-exported here, so ``from gputrain.bench import run_ladder``
works as it always did.  The loop-overhead measurement (``gputrain bench
--loop-overhead``) lives in :mod:`gputrain.train.overhead`, beside the loop it
measures.
"""

from .attention import HandWrittenAttention, use_hand_written_attention
from .config import (
    COMPILE_SCOPES,
    RUNG_NAMES,
    RUNGS,
    LadderConfig,
    cpu_ladder,
    gpu_ladder,
    ladder_config,
    padded_vocab,
)
from .ladder import plan, run_ladder
from .result import LadderResult
from .rung import (
    Batches,
    Recipe,
    Rung,
    fresh_compile_caches,
    has_c_compiler,
    left_out_of_base,
    rung_label,
    skip_reason,
)

__all__ = [
    # config
    "RUNGS",
    "RUNG_NAMES",
    "COMPILE_SCOPES",
    "LadderConfig",
    "cpu_ladder",
    "gpu_ladder",
    "ladder_config",
    "padded_vocab",
    # attention
    "HandWrittenAttention",
    "use_hand_written_attention",
    # rung
    "Recipe",
    "fresh_compile_caches",
    "rung_label",
    "left_out_of_base",
    "has_c_compiler",
    "skip_reason",
    "Batches",
    "Rung",
    # result
    "LadderResult",
    # ladder
    "run_ladder",
    "plan",
]

"""Triton kernels of chapter 11, "Inside the chip": one module per kernel, run on any machine.

On a CUDA GPU they compile for real; without one, Triton's interpreter runs the
same source on the CPU (:mod:`.launch`).  Every kernel can count the bytes it
requests from memory (:class:`Traffic`), so the chapter measures traffic
where it cannot measure speed.

======================  ==========================================================
``add``                 vector add: program ids, blocks, masks
``softmax``             row softmax, fused (one kernel) and unfused (five)
``matmul``              naive and tiled matmul; fp32, fp16, bf16, FP8 codes
``attention``           FlashAttention forward and backward (online softmax), and the naive
                        attention that writes its (T, T) scores to memory; bytes of both
``fp8_gemm``            DeepSeek-V3's FP8 GEMM: 1x128 tile and 128x128 block scales, FP32
                        promotion every 128 (``fp8_gemm``, ``fp8_linear``, bytes by formula)
======================  ==========================================================
"""

from __future__ import annotations

from .add import add
from .attention import (
    FlashAttention,
    flash_attention,
    flash_backward_bytes,
    flash_forward_bytes,
    naive_attention,
    naive_attention_bytes,
)
from .checks import KernelInputError
from .fp8_gemm import fp8_gemm, fp8_gemm_read_bytes, fp8_linear
from .launch import HAVE_TRITON, WHY_NOT, KernelUnavailable, interpreted, kernel_device, launch, mode
from .matmul import largest_square_tile, matmul, naive_matmul, tile_smem_bytes, tiled_read_bytes
from .softmax import softmax, softmax_unfused
from .traffic import Bytes, Traffic

__all__ = [
    "HAVE_TRITON",
    "WHY_NOT",
    "Bytes",
    "FlashAttention",
    "KernelInputError",
    "KernelUnavailable",
    "Traffic",
    "add",
    "flash_attention",
    "flash_backward_bytes",
    "flash_forward_bytes",
    "fp8_gemm",
    "fp8_gemm_read_bytes",
    "fp8_linear",
    "interpreted",
    "kernel_device",
    "largest_square_tile",
    "launch",
    "matmul",
    "mode",
    "naive_attention",
    "naive_attention_bytes",
    "naive_matmul",
    "softmax",
    "softmax_unfused",
    "tile_smem_bytes",
    "tiled_read_bytes",
]

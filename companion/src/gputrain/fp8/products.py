"""The two ways to multiply FP8 operands: ``torch._scaled_mm`` (the kernel) and its emulation (chapter 10).

Both multiply the same FP8 numbers; the emulation dequantizes them and adds
the products in FP32, as the kernel does after promotion.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from .formats import TILE
from .quantize import Quantized, dequantize_2d

_SUPPORT: dict[str, dict[str, str]] = {}


def check_fp8_capability(capability: tuple[int, int], name: str = "this GPU") -> None:
    """Raise one clear error for a GPU without FP8 tensor cores (before Ada/Hopper, sm_89/sm_90)."""
    if tuple(capability) < (8, 9):
        raise ValueError(
            f"FP8 tensor cores need compute capability 8.9 or newer (Ada, Hopper, Blackwell); "
            f"{name} is sm_{capability[0]}{capability[1]}: pass emulate=True to Float8Linear / "
            "convert_to_float8 (same numerics, no speed-up) or train in bf16"
        )


def scaled_mm_support(device: "torch.device | str" = "cpu") -> dict[str, str]:
    """What ``torch._scaled_mm`` accepts on ``device``: ``"ok"`` or the first line of its error, per scaling."""
    device = torch.device(device)
    key = str(device)
    if key in _SUPPORT:
        return _SUPPORT[key]
    n = 256
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device).to(torch.float8_e4m3fn)  # (M, K) row-major
    b = torch.randn(n, n, generator=g).to(device).to(torch.float8_e4m3fn).t()  # (K, N) column-major
    one = torch.ones((), device=device)
    blocks = n // TILE
    tries = {
        "tensorwise": (one, one),
        "rowwise": (torch.ones(n, 1, device=device), torch.ones(1, n, device=device)),
        # DeepSeek-V3's recipe as cuBLAS takes it: (M, K/128) outer-dim-major, 128x128 blocks for b
        "blockwise 1x128 x 128x128": (
            torch.ones(blocks, n, device=device).t(),
            torch.ones(blocks, blocks, device=device).t(),
        ),
    }
    result = {}
    for name, (sa, sb) in tries.items():
        try:
            torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
            result[name] = "ok"
        except Exception as e:  # the message is the information: which variant, which constraint
            result[name] = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
    _SUPPORT[key] = result
    return result


def _pad_codes(data: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """FP8 codes padded with zero bytes (+0.0 in both formats) to ``rows`` x ``cols``."""
    extra_r, extra_c = rows - data.shape[0], cols - data.shape[1]
    if not (extra_r or extra_c):
        return data
    return F.pad(data.view(torch.uint8), (0, extra_c, 0, extra_r)).view(data.dtype)


def _pad_scale(scale: torch.Tensor, rows: int) -> torch.Tensor:
    """Row scales (R, 1) padded with ones for the zero rows added by :func:`_pad_codes`."""
    if scale.dim() == 0 or scale.shape[0] == rows:
        return scale
    return torch.cat([scale, scale.new_ones(rows - scale.shape[0], 1)])


def emulated_product(qa: Quantized, qb: Quantized) -> torch.Tensor:
    """``a @ b.T`` in FP32 from the dequantized FP8 operands (R, K) and (N, K): any scaling, any device."""
    return dequantize_2d(qa) @ dequantize_2d(qb).t()  # (R, N)


def kernel_product(qa: Quantized, qb: Quantized, align: Optional[int] = None) -> torch.Tensor:
    """``a @ b.T`` through one ``torch._scaled_mm`` (tensor or row scales on both sides); FP32 (R, N).

    ``b`` goes in column-major, as cuBLAS wants.  ``align`` pads K and N with
    zero bytes to a multiple (CUDA needs 16; default 16 on CUDA, 1 on the CPU,
    whose kernel takes any shape); zero padding changes no product.
    """
    align = align or (16 if qa.data.is_cuda else 1)
    (R, K), N = qa.data.shape, qb.data.shape[0]
    k_pad, n_pad = -(-K // align) * align, -(-N // align) * align
    a = _pad_codes(qa.data, R, k_pad)  # (R, K') row-major
    b = _pad_codes(qb.data, n_pad, k_pad)  # (N', K') row-major, so b.t() is column-major
    sa, sb = qa.scale, _pad_scale(qb.scale, n_pad).reshape(1, -1).contiguous()  # rowwise: (R, 1), (1, N')
    # CUDA's rowwise kernels want BF16 output; the CPU kernel keeps FP32
    out = torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16 if a.is_cuda else torch.float32)
    return out[:, :N].float()  # (R, N)

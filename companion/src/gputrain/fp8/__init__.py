"""FP8 training the way DeepSeek-V3 does it, built piece by piece and measured (chapter 10).

One mechanism per module, each importing only those above it:

* :mod:`~gputrain.fp8.formats`: facts of E4M3 and E5M2, read off all 256 bit
  patterns of the real ``torch.float8_*`` dtypes (:func:`representable`,
  :func:`format_facts`, :func:`cast_behaviour`); the formats themselves live
  in :mod:`gputrain.precision`.
* :mod:`~gputrain.fp8.quantize`: :func:`quantize` / :func:`dequantize` with
  one scale per tensor, per row, per 1x128 tile (DeepSeek-V3's activations)
  or per 128x128 block (its weights), computed online from each group's max-abs.
* :mod:`~gputrain.fp8.accumulate`: :func:`limited_dot`, a dot product
  accumulated with ~14 mantissa bits, as DeepSeek-V3 measured on H800 tensor
  cores, with optional promotion of the partial sum to FP32 every ``N_C`` products.
* :mod:`~gputrain.fp8.products`: the two ways to multiply FP8 operands,
  ``torch._scaled_mm`` and its emulation, which multiplies the same numbers.
* :mod:`~gputrain.fp8.probe`: :func:`fast_scaled_mm`, whether the kernel is
  fast here, measured once per process (on some CPUs 2,500x slower than FP32).
* :mod:`~gputrain.fp8.gemm`: :func:`scaled_matmul` and :func:`fp8_gemm`, the
  kernel where it is fast and the emulation elsewhere.
* :mod:`~gputrain.fp8.linear`: :class:`Float8Linear`, a drop-in ``nn.Linear``
  whose forward and both backward GEMMs are FP8 products;
  :func:`convert_to_float8` swaps it into a model.
* :mod:`~gputrain.fp8.timing`: GEMM throughput on prepared operands.
"""

from .accumulate import exact_dot, limited_dot, round_mantissa
from .formats import FP8_NAMES, GRANULARITIES, TILE, cast_behaviour, format_facts, fp8_format, representable
from .gemm import fp8_gemm, scaled_matmul
from .linear import (
    DEFAULT_SKIP,
    Float8Linear,
    _Float8Matmul,  # noqa: F401 (chapter 10 shows its source)
    convert_to_float8,
    float8_layers,
    linear_operands,
)
from .probe import FUSED, SCALED_MM_ENV, SCALED_MM_SLOW_FACTOR, ScaledMMSpeed, emulates, fast_scaled_mm
from .products import check_fp8_capability, emulated_product, kernel_product, scaled_mm_support
from .quantize import (
    Quantized,
    dequantize,
    dequantize_2d,
    fake_quantize,
    flushed_fraction,
    quantization_error,
    quantize,
    transpose,
)
from .timing import GemmKind, gemm_operands, gemm_tflops

__all__ = [
    "DEFAULT_SKIP",
    "FP8_NAMES",
    "FUSED",
    "GRANULARITIES",
    "SCALED_MM_ENV",
    "SCALED_MM_SLOW_FACTOR",
    "TILE",
    "Float8Linear",
    "GemmKind",
    "Quantized",
    "ScaledMMSpeed",
    "cast_behaviour",
    "check_fp8_capability",
    "convert_to_float8",
    "dequantize",
    "dequantize_2d",
    "emulated_product",
    "emulates",
    "exact_dot",
    "fake_quantize",
    "fast_scaled_mm",
    "float8_layers",
    "flushed_fraction",
    "format_facts",
    "fp8_format",
    "fp8_gemm",
    "gemm_operands",
    "gemm_tflops",
    "kernel_product",
    "limited_dot",
    "linear_operands",
    "quantization_error",
    "quantize",
    "representable",
    "round_mantissa",
    "scaled_matmul",
    "scaled_mm_support",
    "transpose",
]

"""``gputrain info``: versions, device, preset, peak FLOP/s, and whether bf16 and FP8 products are fast here."""

from __future__ import annotations

import json


def _cmd_info(args) -> int:
    from ..device import info
    from ..fp8 import fast_scaled_mm
    from ..speed import native_bf16

    data = info()
    bf16 = native_bf16()  # measured once: a CPU without AVX-512 BF16/AMX runs bf16 products in software
    data["bf16_native"], data["bf16"] = bf16.native, bf16.reason
    fp8 = fast_scaled_mm()  # measured once: some CPUs run tensorwise FP8 products 2,500x slower than FP32
    data["fp8_scaled_mm_fast"], data["fp8_scaled_mm"] = fp8.fast, fp8.reason
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        width = max(len(k) for k in data)
        for key, value in data.items():
            print(f"{key:<{width}}  {'unknown' if value is None else value}")
    return 0


def _add_info(sub) -> None:
    p_info = sub.add_parser(
        "info", help="versions, device, preset, peak FLOP/s, whether bf16 and FP8 products are fast"
    )
    p_info.add_argument("--json", action="store_true", help="print as JSON")
    p_info.set_defaults(func=_cmd_info)

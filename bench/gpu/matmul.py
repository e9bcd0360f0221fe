"""Matmul TFLOP/s against size for bf16, fp16, tf32 and fp32, and copy bandwidth: the roofline's data.

Chapter 2 plots these next to the device's datasheet peak.  Runs on one CUDA
GPU in well under a minute and writes ``<out>/matmul.json``:

    python bench/gpu/matmul.py --out book/results
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from gputrain.device import device_name, peak_flops
from gputrain.results import write_result
from gputrain.speed import copy_bandwidth, matmul_sweep

SIZES = [256, 512, 1024, 2048, 4096, 8192, 16384]
DTYPES = ["bf16", "fp16", "tf32", "fp32"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("book/results"), help="folder for matmul.json")
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES, help="square matrix sizes n")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench/gpu/matmul.py measures a CUDA GPU; none is visible here", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    rows = [p.to_dict() for p in matmul_sweep(args.sizes, DTYPES)]
    for r in rows:
        frac = f"{r['fraction_of_peak']:6.1%}" if r["fraction_of_peak"] is not None else "   n/a"
        print(f"{r['dtype']:>5} n={r['n']:>6}: {r['tflops']:8.1f} TFLOP/s  {frac} of peak", flush=True)
    bandwidth = copy_bandwidth(1 << 30)  # 1 GiB read + 1 GiB written per copy
    print(f"copy bandwidth: {bandwidth / 1e12:.2f} TB/s")
    data = {
        "device": device_name(),
        "rows": rows,
        "copy_bandwidth_bytes_per_s": bandwidth,
        "peak_tflops": {d: (peak_flops(d) or 0) / 1e12 or None for d in DTYPES},
        "seconds_total": time.perf_counter() - t0,
    }
    write_result(args.out / "matmul.json", data)
    print(f"wrote {args.out / 'matmul.json'} in {data['seconds_total']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

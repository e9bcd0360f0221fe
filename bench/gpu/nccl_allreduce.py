"""NCCL all-reduce bus bandwidth between GPUs: the link speed chapter 8's time model assumes.

Runs :func:`gputrain.parallel.ring.bandwidth_survey` on one process per GPU
(NCCL), for ``dist.all_reduce`` and the from-scratch ``ring_all_reduce``, and
writes ``<out>/nccl_allreduce.json``.  It needs at least two GPUs: with one
there is no link to measure, and it says so instead of writing a number.
Takes well under a minute:

    python bench/gpu/nccl_allreduce.py --out book/results
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from gputrain.device import device_name
from gputrain.parallel import launch
from gputrain.parallel.ring import bandwidth_survey
from gputrain.results import write_result

SIZES = [1 << 20, 1 << 24, 1 << 28]  # 1 MiB, 16 MiB, 256 MiB of float32


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("book/results"), help="folder for nccl_allreduce.json")
    parser.add_argument("--gpus", type=int, default=torch.cuda.device_count(), help="processes, one per GPU")
    args = parser.parse_args(argv)
    if args.gpus < 2 or torch.cuda.device_count() < args.gpus:
        print(
            f"bench/gpu/nccl_allreduce.py needs at least 2 CUDA GPUs; {torch.cuda.device_count()} visible, "
            "so no link bandwidth was measured",
            file=sys.stderr,
        )
        return 1
    t0 = time.perf_counter()
    rows = launch(bandwidth_survey, args.gpus, SIZES, 10, backend="nccl", timeout=300)[0]
    for row in rows:
        print(
            f"{row['bytes'] / 2**20:8.0f} MiB: dist.all_reduce {row['dist.all_reduce']['bus_GBps']:7.1f} GB/s, "
            f"ring_all_reduce {row['ring_all_reduce']['bus_GBps']:7.1f} GB/s (bus bandwidth)"
        )
    data = {"device": device_name(), "gpus": args.gpus, "rows": rows, "seconds_total": time.perf_counter() - t0}
    write_result(args.out / "nccl_allreduce.json", data)
    print(f"wrote {args.out / 'nccl_allreduce.json'} in {data['seconds_total']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

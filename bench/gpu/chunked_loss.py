"""Peak GPU memory of the output-head loss at GPT-2 scale: naive vs chunked (chapter 3).

Forward + backward of cross-entropy over ``hidden (B, T, C) @ weight (V, C).T``
with B=8, T=1024, C=768, V=50257, once with all logits materialized
(``naive_head_cross_entropy``) and once ``chunk_size`` rows at a time
(``chunked_cross_entropy``), in float32 and bfloat16 inputs.  Peak memory is
``torch.cuda.max_memory_allocated`` above the memory held before the step.
Runs in well under a minute on an H100/H200:

    python bench/gpu/chunked_loss.py --out book/results
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from gputrain.loss import compare_head_memory
from gputrain.results import write_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("book/results"), help="folder for chunked_loss.json")
    parser.add_argument("--chunk-size", type=int, default=1024, help="rows of logits per chunk")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench/gpu/chunked_loss.py needs a CUDA GPU; on a CPU the chapter measures a smaller size live")
    runs = []
    for dtype in (torch.float32, torch.bfloat16):
        r = compare_head_memory(
            batch=8,
            seq=1024,
            vocab=50257,
            width=768,
            chunk_size=args.chunk_size,
            dtype=dtype,
            dev=torch.device("cuda"),
            repeats=5,
        )
        print(
            f"{r['dtype']:>9}: naive {r['naive_peak_bytes'] / 2**30:.2f} GiB, {r['naive_seconds'] * 1e3:.1f} ms; "
            f"chunked {r['chunked_peak_bytes'] / 2**30:.2f} GiB, {r['chunked_seconds'] * 1e3:.1f} ms; "
            f"saving x{r['saving_factor']:.1f}; loss {r['naive_loss']:.6f} vs {r['chunked_loss']:.6f}"
        )
        runs.append(r)
    write_result(args.out / "chunked_loss.json", {"runs": runs})


if __name__ == "__main__":
    main()

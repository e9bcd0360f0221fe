"""The image input pipeline on a GPU: augmentation, a training step, JPEG loading, host-to-device copies.

Chapter 1 compares these with the same measurements on a CPU.  Runs on one
CUDA GPU in well under a minute and writes ``<out>/data_pipeline.json``:

    python bench/gpu/data_pipeline.py --out book/results
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from gputrain import data
from gputrain.device import median_seconds
from gputrain.results import write_result


def h2d_gb_s(batch: torch.Tensor, dev: torch.device, repeats: int = 10) -> float:
    """Host-to-device copy bandwidth of ``batch`` (pinned or not), median of ``repeats``."""
    return (
        batch.numel()
        * batch.element_size()
        / median_seconds(lambda: batch.to(dev, non_blocking=True), repeats=repeats, warmup=2)
        / 1e9
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("book/results"), help="folder for data_pipeline.json")
    parser.add_argument("--batch", type=int, default=256, help="images per batch")
    parser.add_argument("--images", type=int, default=1024, help="JPEG samples per loader measurement")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench/gpu/data_pipeline.py measures a CUDA GPU; none is visible here", file=sys.stderr)
        return 1
    t0, dev, B = time.perf_counter(), torch.device("cuda"), args.batch
    photos = [
        data.center_crop(data.resize_shorter(data.decode_jpeg(p.read_bytes()), 256), 256)
        for p in data.sample_image_files()
    ]
    batch = torch.stack(photos)[torch.arange(B) % len(photos)].to(dev).float() / 255  # (B, 3, 256, 256)
    gen = torch.Generator().manual_seed(0)
    t_batch = median_seconds(lambda: data.augment(batch, 224, generator=gen), repeats=10, warmup=3)
    t_loop = median_seconds(
        lambda: torch.cat([data.augment(batch[i : i + 1], 224, generator=gen) for i in range(B)]), repeats=3
    )
    print(f"augment: {B / t_batch:,.0f} images/s batched, {B / t_loop:,.0f} one at a time")

    # the same small CNN as chapter 1's loader section, one SGD step on (B, 3, 224, 224)
    cnn = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 7, stride=4),
        torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, stride=2),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(64, 2),
    ).to(dev)
    opt = torch.optim.SGD(cnn.parameters(), lr=0.01)
    xb, yb = batch[:, :, :224, :224].contiguous(), torch.randint(0, 2, (B,), device=dev)

    def step() -> None:
        loss = F.cross_entropy(cnn(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step_s = median_seconds(step, repeats=20, warmup=5)
    print(f"model step: {step_s * 1e3:.2f} ms = {B / step_s:,.0f} samples/s")

    jpegs = [p.read_bytes() for p in data.sample_image_files()]
    images = data.JpegImages(jpegs, length=args.images, size=224)
    loader = []
    for w in (0, 4, 8, min(16, os.cpu_count() or 1)):
        s = data.loader_throughput(data.make_loader(images, 128, num_workers=w, pin_memory=True), device=dev)
        loader.append({"workers": w, "samples_per_s": s.samples_per_s, "seconds": s.seconds})
        print(f"JPEG loader, {w:>2} workers: {s.samples_per_s:,.0f} samples/s")

    raw = torch.randint(0, 256, (B, 3, 224, 224), dtype=torch.uint8)
    pinned, pageable = h2d_gb_s(raw.pin_memory(), dev), h2d_gb_s(raw, dev)
    print(f"host-to-device copy of {raw.numel() / 1e6:.0f} MB: pinned {pinned:.1f} GB/s, pageable {pageable:.1f} GB/s")
    result = {
        "batch_size": B,
        "augment_images_per_s": B / t_batch,
        "augment_loop_images_per_s": B / t_loop,
        "model_step_s": step_s,
        "model_samples_per_s": B / step_s,
        "loader": loader,
        "cpu_count": os.cpu_count(),
        "h2d_pinned_gb_s": pinned,
        "h2d_pageable_gb_s": pageable,
        "seconds_total": time.perf_counter() - t0,
    }
    out = args.out / "data_pipeline.json"
    write_result(out, result)
    print(f"wrote {out} in {result['seconds_total']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Images as tensors: photo -> (C, H, W), resize, normalisation, batch augmentation (chapter 1).

The photos are the two JPEGs scikit-learn ships; augmentations are torch
operations on whole batches, so they run on the GPU as well as the CPU.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F


def _sklearn(what: str):
    try:
        import sklearn.datasets
    except ImportError as e:  # scikit-learn is in the [book] extra, not a core dependency
        raise ImportError(f"{what} needs scikit-learn: pip install scikit-learn (or gputrain[book])") from e
    return sklearn.datasets


def sample_image_files() -> list[Path]:
    """Paths of the JPEG photos scikit-learn ships (``china.jpg``, ``flower.jpg``)."""
    return [Path(f) for f in _sklearn("sample_image_files").load_sample_images().filenames]


def to_tensor(image) -> torch.Tensor:
    """An (H, W, C) image (NumPy array or PIL image) as a (C, H, W) tensor, same dtype and values."""
    t = torch.from_numpy(np.array(image))  # a copy: the caller's array stays untouched
    if t.dim() != 3:
        hint = (
            "for a grayscale image add a channel axis first (img[..., None])"
            if t.dim() == 2
            else "that is a batch: convert each image and torch.stack them"
            if t.dim() == 4
            else "pass one image of shape (H, W, C)"
        )
        raise ValueError(f"an image needs 3 dimensions (H, W, C), got shape {tuple(t.shape)}; {hint}")
    return t.permute(2, 0, 1).contiguous()  # (H, W, C) -> (C, H, W): channels first, as PyTorch expects


def sample_image(name: str = "china.jpg") -> torch.Tensor:
    """One of scikit-learn's sample photos as a (3, H, W) uint8 tensor."""
    names = [p.name for p in sample_image_files()]
    if name not in names:
        raise ValueError(f"no sample image {name!r}; choose one of {names}")
    images = _sklearn("sample_image").load_sample_images().images
    return to_tensor(images[names.index(name)])


def decode_jpeg(data: bytes) -> torch.Tensor:
    """JPEG (or any format Pillow reads) bytes -> (3, H, W) uint8 tensor."""
    from PIL import Image  # Pillow comes with matplotlib

    return to_tensor(Image.open(io.BytesIO(data)).convert("RGB"))


def _check_image(x: torch.Tensor, batch: bool = False) -> None:
    want = (4,) if batch else (3, 4)
    if x.dim() not in want:
        shape = "(B, C, H, W)" if batch else "(C, H, W) or (B, C, H, W)"
        hint = " add a batch axis with x[None]" if batch and x.dim() == 3 else ""
        raise ValueError(
            f"expected an image tensor of shape {shape}, got shape {tuple(x.shape)};"
            f"{hint or ' convert with data.to_tensor'}"
        )


def resize(x: torch.Tensor, size: int | tuple[int, int]) -> torch.Tensor:
    """Bilinear resize with antialiasing (as Pillow does) to ``size`` = (H, W) or a square side.

    Works on (C, H, W) or (B, C, H, W); uint8 in, uint8 out (rounded).
    """
    _check_image(x)
    hw = (size, size) if isinstance(size, int) else tuple(size)
    batch = (x[None] if x.dim() == 3 else x).float()  # interpolate needs floats: (B, C, H, W)
    y = F.interpolate(batch, size=hw, mode="bilinear", antialias=True, align_corners=False)
    if not x.is_floating_point():  # round back so uint8 stays uint8
        y = y.round().clamp(0, 255).to(x.dtype)
    return y[0] if x.dim() == 3 else y


def resize_shorter(x: torch.Tensor, side: int) -> torch.Tensor:
    """Resize so the shorter side is ``side`` pixels, keeping the aspect ratio."""
    _check_image(x)
    h, w = x.shape[-2:]
    scale = side / min(h, w)
    return resize(x, (max(side, round(h * scale)), max(side, round(w * scale))))


def center_crop(x: torch.Tensor, size: int) -> torch.Tensor:
    """The central ``size`` x ``size`` window of (..., H, W)."""
    h, w = x.shape[-2:]
    if size > min(h, w):
        raise ValueError(f"crop of {size} is larger than the image ({h}x{w}); resize first")
    top, left = (h - size) // 2, (w - size) // 2
    return x[..., top : top + size, left : left + size]


def minmax(x: torch.Tensor, dims: Optional[tuple[int, ...]] = None) -> torch.Tensor:
    """Min-max scaling to [0, 1] over ``dims`` (all dims by default); a constant input maps to 0."""
    x = x.float()
    dims = tuple(range(x.dim())) if dims is None else dims
    lo, hi = x.amin(dim=dims, keepdim=True), x.amax(dim=dims, keepdim=True)
    return (x - lo) / (hi - lo).clamp_min(torch.finfo(x.dtype).tiny)


def channel_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and (population) std of (C, H, W) or (B, C, H, W), as (C,) tensors."""
    _check_image(x)
    x = x.float()
    dims = (1, 2) if x.dim() == 3 else (0, 2, 3)
    return x.mean(dim=dims), x.std(dim=dims, correction=0)


def standardize(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """(x - mean) / std per channel of (C, H, W) or (B, C, H, W): zero mean, unit spread."""
    _check_image(x)
    return (x.float() - mean.view(-1, 1, 1)) / std.view(-1, 1, 1)  # (C,) -> (C, 1, 1) broadcasts


def _rand(n: int, generator: Optional[torch.Generator]) -> torch.Tensor:
    return torch.rand(n, generator=generator)  # drawn on the CPU so a CPU generator seeds GPU batches too


def random_flip(x: torch.Tensor, p: float = 0.5, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Mirror each image of a (B, C, H, W) batch left-right with probability ``p``."""
    _check_image(x, batch=True)
    flip = (_rand(x.shape[0], generator) < p).to(x.device).view(-1, 1, 1, 1)  # (B, 1, 1, 1)
    return torch.where(flip, x.flip(-1), x)


def random_crop(
    x: torch.Tensor, size: int, padding: int = 0, generator: Optional[torch.Generator] = None
) -> torch.Tensor:
    """A random ``size`` x ``size`` window per image of a (B, C, H, W) batch (after zero ``padding``)."""
    _check_image(x, batch=True)
    if padding:
        x = F.pad(x, (padding,) * 4)
    B, C, H, W = x.shape
    if size > min(H, W):
        raise ValueError(f"crop of {size} is larger than the images ({H}x{W}); resize first")
    top = (_rand(B, generator) * (H - size + 1)).long().to(x.device)  # (B,)
    left = (_rand(B, generator) * (W - size + 1)).long().to(x.device)  # (B,)
    ar = torch.arange(size, device=x.device)
    rows = (top[:, None] + ar).view(B, 1, size, 1)  # (B, 1, S, 1)
    cols = (left[:, None] + ar).view(B, 1, 1, size)  # (B, 1, 1, S)
    b = torch.arange(B, device=x.device).view(B, 1, 1, 1)
    c = torch.arange(C, device=x.device).view(1, C, 1, 1)
    return x[b, c, rows, cols]  # (B, C, S, S): one gather, no Python loop over images


def rotate(x: torch.Tensor, degrees: torch.Tensor | float) -> torch.Tensor:
    """Rotate each image of a (B, C, H, W) batch counter-clockwise about its centre (bilinear, zero fill)."""
    _check_image(x, batch=True)
    B, _, H, W = x.shape
    theta = torch.as_tensor(degrees, dtype=torch.float32).expand(B).to(x.device) * math.pi / 180
    cos, sin = torch.cos(theta), torch.sin(theta)
    # affine_grid works in [-1, 1] coordinates; scale by the aspect ratio so a
    # non-square image rotates rigidly instead of shearing.
    a = torch.stack(
        [
            torch.stack([cos, -sin * H / W, torch.zeros_like(cos)], -1),
            torch.stack([sin * W / H, cos, torch.zeros_like(cos)], -1),
        ],
        1,
    )  # (B, 2, 3)
    grid = F.affine_grid(a, list(x.shape), align_corners=False)  # (B, H, W, 2)
    out = F.grid_sample(x.float(), grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return out if x.is_floating_point() else out.round().clamp(0, 255).to(x.dtype)


def random_rotation(x: torch.Tensor, max_degrees: float, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Rotate each image by an angle drawn uniformly from [-max_degrees, max_degrees]."""
    _check_image(x, batch=True)
    return rotate(x, (_rand(x.shape[0], generator) * 2 - 1) * max_degrees)


def augment(
    x: torch.Tensor, size: int, generator: Optional[torch.Generator] = None, max_degrees: float = 15.0, padding: int = 0
) -> torch.Tensor:
    """Flip, rotate, then crop a (B, C, H, W) batch to ``size``: the chapter's augmentation pipeline."""
    x = random_flip(x, generator=generator)
    x = random_rotation(x, max_degrees, generator=generator)
    return random_crop(x, size, padding=padding, generator=generator)

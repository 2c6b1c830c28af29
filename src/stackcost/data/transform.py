"""Fit images to a model's input: resolution (resize or zero-pad) and channel count.

Channels: 1 -> 3 repeats the grey plane; 3 -> 1 is the plain mean of R, G and B (not a
luminance weighting: simple, and the same on every backend). Channels are reduced before
resizing and expanded after, so the interpolation runs on as few planes as possible.
Resolution: output is square, resolution x resolution.
  mode="resize": torch bilinear interpolation (align_corners=False), antialiased when
    shrinking so small targets do not alias.
  mode="pad": zero border, centred (odd remainder at the bottom/right), pixels untouched;
    the classic MNIST 28 -> 32 for LeNet. The target must not be smaller than the image.
uint8 stays uint8 (rounded and clamped), float32 stays float32. torch is imported only
when there is work to do; images go through in chunks to bound the float32 temporaries.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

import numpy as np

from stackcost.data.base import Dataset

__all__ = ["resize", "resize_images"]

Mode = Literal["resize", "pad"]
CHUNK = 256


def resize_images(
    images: np.ndarray,
    resolution: int | None = None,
    channels: int | None = None,
    *,
    mode: Mode = "resize",
) -> np.ndarray:
    """(N, C, H, W) -> (N, channels, resolution, resolution); None keeps that dimension."""
    if images.ndim != 4:
        raise ValueError(f"images must be (N, C, H, W), got {images.shape}")
    if mode not in ("resize", "pad"):
        raise ValueError(f"mode must be 'resize' or 'pad', got {mode!r}")
    n, c_in, h, w = images.shape
    c_out = c_in if channels is None else channels
    if c_out != c_in and (c_in, c_out) not in ((1, 3), (3, 1)):
        raise ValueError(f"cannot convert {c_in} channels to {c_out}: only 1 <-> 3")
    size = (h, w) if resolution is None else (resolution, resolution)
    if min(size) < 1:
        raise ValueError(f"resolution must be positive, got {resolution}")
    if mode == "pad" and (size[0] < h or size[1] < w):
        raise ValueError(
            f"cannot pad {h}x{w} images down to {size[0]}x{size[1]}; use mode='resize'"
        )
    if c_out == c_in and size == (h, w):
        return images

    import torch
    import torch.nn.functional as F

    out = np.empty((n, c_out, *size), dtype=images.dtype)
    shrinking = size[0] < h or size[1] < w
    top, left = (size[0] - h) // 2, (size[1] - w) // 2
    for start in range(0, n, CHUNK):
        x = torch.from_numpy(images[start : start + CHUNK]).float()
        if c_in == 3 and c_out == 1:
            x = x.mean(dim=1, keepdim=True)
        if size != (h, w):
            if mode == "resize":
                x = F.interpolate(
                    x, size=size, mode="bilinear", align_corners=False, antialias=shrinking
                )
            else:
                x = F.pad(x, (left, size[1] - w - left, top, size[0] - h - top))
        if c_in == 1 and c_out == 3:
            x = x.expand(-1, 3, -1, -1)
        if images.dtype == np.uint8:
            x = x.round().clamp_(0, 255).to(torch.uint8)
        out[start : start + CHUNK] = x.numpy()
    return out


def resize(
    dataset: Dataset,
    resolution: int | None = None,
    channels: int | None = None,
    *,
    mode: Mode = "resize",
) -> Dataset:
    """The dataset with its images fitted by `resize_images`; itself if nothing changes."""
    images = resize_images(dataset.images, resolution, channels, mode=mode)
    return dataset if images is dataset.images else replace(dataset, images=images)

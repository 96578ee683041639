"""Procedural training images for the embedded visual AR model.

Ten classes of flat-coloured shapes and patterns on a flat background, 64x64 RGB, drawn by numpy
from a seed (fully reproducible, nothing downloaded).  Colours come from a small palette, edges
are hard and the geometry is snapped to the 4-pixel patch grid, so the images are piecewise
constant with few distinct patches: a 4x4-patch VQ tokenizer represents them almost exactly and
a tiny AR model trained for minutes on 2 CPU cores learns them.  Long runs of predictable tokens
(background) are broken by shape boundaries.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CLASSES", "PALETTE", "IMAGE_SIZE", "render", "make_dataset"]

IMAGE_SIZE = 64

CLASSES = (
    "disc",
    "square",
    "triangle",
    "ring",
    "h-stripes",
    "v-stripes",
    "checker",
    "cross",
    "diag-stripes",
    "diamond",
)

# uint8 RGB palette: background and foreground colours are drawn from it (distinct).
PALETTE = np.array(
    [
        [20, 24, 38],  # ink
        [236, 232, 220],  # paper
        [214, 69, 65],  # red
        [242, 177, 52],  # amber
        [72, 160, 96],  # green
        [52, 118, 196],  # blue
        [142, 84, 178],  # violet
        [40, 178, 178],  # teal
    ],
    dtype=np.uint8,
)


def _mask(cls: int, rng: np.random.Generator, n: int) -> np.ndarray:
    """Foreground mask [n, n] bool of one shape of class ``cls``.  Geometry is snapped to the
    4-pixel patch grid (centres, sizes, stripe periods and phases are multiples of 4), so every
    patch the tokenizer sees is one of a small set of solid or edge patterns."""
    y, x = np.mgrid[0:n, 0:n].astype(np.float32) + 0.5
    cy, cx = 4 * rng.integers(round(0.35 * n / 4), round(0.65 * n / 4) + 1, size=2)
    r = float(4 * rng.integers(3, 6))  # 12, 16 or 20 px
    if cls == 0:  # disc
        return (y - cy) ** 2 + (x - cx) ** 2 < r**2
    if cls == 1:  # axis-aligned square
        return (np.abs(y - cy) < r) & (np.abs(x - cx) < r)
    if cls == 2:  # upward triangle: apex at top, base at cy + r
        top, base = cy - r, cy + r
        half = (y - top) / 2
        return (y > top) & (y < base) & (np.abs(x - cx) < half)
    if cls == 3:  # ring
        d2 = (y - cy) ** 2 + (x - cx) ** 2
        w = float(rng.choice([4, 8]))
        return (d2 < r**2) & (d2 > (r - w) ** 2)
    period = int(rng.choice([8, 16]))
    phase = 4 * int(rng.integers(0, period // 4))
    if cls == 4:  # horizontal stripes
        return ((y + phase) % period) < period / 2
    if cls == 5:  # vertical stripes
        return ((x + phase) % period) < period / 2
    if cls == 6:  # checkerboard
        return (((y + phase) // period + (x + phase) // period) % 2) == 0
    if cls == 7:  # plus sign
        w = float(rng.choice([4, 8]))
        return ((np.abs(y - cy) < w) & (np.abs(x - cx) < r + 4)) | (
            (np.abs(x - cx) < w) & (np.abs(y - cy) < r + 4)
        )
    if cls == 8:  # diagonal stripes
        return ((x + y + phase) % period) < period / 2
    if cls == 9:  # diamond
        return np.abs(y - cy) + np.abs(x - cx) < r + 4
    raise ValueError(f"class must be in [0, {len(CLASSES)}), got {cls}")


def render(cls: int, rng: np.random.Generator, size: int = IMAGE_SIZE) -> np.ndarray:
    """One image of class ``cls`` as uint8 [size, size, 3]."""
    bg, fg = rng.choice(len(PALETTE), size=2, replace=False)
    img = np.empty((size, size, 3), dtype=np.uint8)
    img[:] = PALETTE[bg]
    img[_mask(cls, rng, size)] = PALETTE[fg]
    return img


def make_dataset(n_per_class: int, seed: int = 0, size: int = IMAGE_SIZE):
    """``n_per_class`` images of every class: (images uint8 [M, size, size, 3], labels int64 [M]),
    classes interleaved; the same seed gives the same images."""
    rng = np.random.default_rng(seed)
    m = n_per_class * len(CLASSES)
    labels = np.arange(m, dtype=np.int64) % len(CLASSES)
    images = np.stack([render(int(c), rng, size) for c in labels])
    return images, labels

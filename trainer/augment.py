"""Training augmentation for square head crops (numpy + cv2; every random draw from a numpy Generator).

Pipeline (``HeadAugment.__call__``), on an RGB uint8 head crop whose head sits in the middle:

1. background randomisation, with probability ``background_p``: pixels outside a soft, centred elliptical
   head mask are replaced by a random background -- a solid colour, smooth noise, or a blurred corner
   patch of another sample (``other``);
2. random resized crop around the head: a square-ish window covering ``scale`` (0.85-1.0) of the area,
   aspect ratio ``ratio``, placed at random inside the crop, resized to ``size`` x ``size``;
3. horizontal flip with probability ``flip_p``;
4. light colour jitter: brightness, contrast and saturation factors in ``1 +- jitter``.

The output is a float32 tensor (3, size, size) in [-1, 1], scaled by ``headsearch.models.dual_cls.pixels_to_input``
as the indexer's embedder does. ``eval_transform`` is the embedder's own preprocessing
(``headsearch.models.dual_cls.image_to_input``) without any randomness.
"""
from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
import torch
from torch import Tensor

from headsearch.models.dual_cls import image_to_input, pixels_to_input

BACKGROUND_KINDS = ("solid", "noise", "patch")


def eval_transform(rgb: np.ndarray, size: int = 112) -> Tensor:
    """Deterministic preprocessing, the same as the indexer's: resize (INTER_AREA), scale to [-1, 1]."""
    return torch.from_numpy(image_to_input(rgb, size))


def head_mask(height: int, width: int, axes: tuple[float, float] = (0.36, 0.44),
              center: tuple[float, float] = (0.5, 0.5), feather: float = 0.06) -> np.ndarray:
    """Soft elliptical head mask (H, W) float32 in [0, 1]: 1 inside the head, 0 in the background.

    ``axes`` are the ellipse's semi-axes as fractions of the width and height, ``center`` its centre as
    fractions; ``feather`` is the width (fraction of the shorter side) of the smooth transition.
    """
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    ax, ay = axes[0] * width, axes[1] * height
    cx, cy = center[0] * width, center[1] * height
    r = np.sqrt(((xs + 0.5 - cx) / ax) ** 2 + ((ys + 0.5 - cy) / ay) ** 2)  # 1 on the ellipse
    band = max(feather * min(height, width) / max(min(ax, ay), 1e-6), 1e-6)  # transition width in r units
    return np.clip((1.0 + band / 2 - r) / band, 0.0, 1.0).astype(np.float32)


def random_background(height: int, width: int, rng: np.random.Generator, other: np.ndarray | None = None,
                      kind: str | None = None) -> np.ndarray:
    """A random (H, W, 3) float32 background in [0, 255]: solid colour, smooth noise, or a blurred corner
    patch of ``other`` (another sample's crop; falls back to noise when ``other`` is None)."""
    kinds = BACKGROUND_KINDS if other is not None else BACKGROUND_KINDS[:2]
    if kind is None:
        kind = kinds[int(rng.integers(len(kinds)))]
    if kind == "solid":
        colour = rng.uniform(0, 255, size=3).astype(np.float32)
        return np.broadcast_to(colour, (height, width, 3)).copy()
    if kind == "noise":
        cells = int(rng.integers(4, 17))  # coarse noise grid, upsampled: blotchy, not per-pixel static
        coarse = rng.uniform(0, 255, size=(cells, cells, 3)).astype(np.float32)
        smooth = cv2.resize(coarse, (width, height), interpolation=cv2.INTER_CUBIC)
        fine = rng.normal(0, 8, size=(height, width, 3)).astype(np.float32)
        return np.clip(smooth + fine, 0, 255)
    if kind == "patch":
        if other is None:
            raise ValueError("a patch background needs another sample's image")
        oh, ow = other.shape[:2]
        side = max(4, int(round(min(oh, ow) * rng.uniform(0.2, 0.3))))
        corner = int(rng.integers(4))
        y0 = 0 if corner in (0, 1) else oh - side
        x0 = 0 if corner in (0, 2) else ow - side
        patch = np.ascontiguousarray(other[y0:y0 + side, x0:x0 + side]).astype(np.float32)
        big = cv2.resize(patch, (width, height), interpolation=cv2.INTER_LINEAR)
        sigma = 0.02 * min(height, width) + 1.0
        return cv2.GaussianBlur(big, (0, 0), sigmaX=sigma, sigmaY=sigma)
    raise ValueError(f"unknown background kind {kind!r}; expected one of {', '.join(BACKGROUND_KINDS)}")


def replace_background(rgb: np.ndarray, background: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Blend: head (mask 1) from ``rgb``, the rest from ``background``; float32 (H, W, 3)."""
    m = mask[..., None]
    return rgb.astype(np.float32) * m + background.astype(np.float32) * (1.0 - m)


@dataclass
class HeadAugment:
    """Random head-crop augmentation; see the module docstring for the steps."""

    size: int = 112
    scale: tuple[float, float] = (0.85, 1.0)  # area fraction of the random resized crop
    ratio: tuple[float, float] = (0.9, 1.0 / 0.9)  # aspect ratio (w / h) range of the crop window
    flip_p: float = 0.5
    jitter: float = 0.15  # brightness / contrast / saturation factors in [1 - jitter, 1 + jitter]
    background_p: float = 0.5
    mask_axes: tuple[float, float] = (0.36, 0.44)
    mask_center: tuple[float, float] = (0.5, 0.5)
    mask_feather: float = 0.06

    def __post_init__(self) -> None:
        if not 0.0 < self.scale[0] <= self.scale[1] <= 1.0:
            raise ValueError(f"scale must satisfy 0 < lo <= hi <= 1, got {self.scale}")
        if not 0.0 < self.ratio[0] <= self.ratio[1]:
            raise ValueError(f"ratio must satisfy 0 < lo <= hi, got {self.ratio}")
        self._mask_cache: dict[tuple[int, int], np.ndarray] = {}

    def mask(self, height: int, width: int) -> np.ndarray:
        key = (height, width)
        if key not in self._mask_cache:
            self._mask_cache[key] = head_mask(height, width, self.mask_axes, self.mask_center, self.mask_feather)
        return self._mask_cache[key]

    def crop_window(self, height: int, width: int, rng: np.random.Generator) -> tuple[float, float, float, float]:
        """(x0, y0, w, h) of a random window covering scale of the area, inside the image."""
        area = height * width * rng.uniform(*self.scale)
        log_r = rng.uniform(np.log(self.ratio[0]), np.log(self.ratio[1]))
        aspect = float(np.exp(log_r))
        w = min(float(np.sqrt(area * aspect)), float(width))
        h = min(float(np.sqrt(area / aspect)), float(height))
        x0 = rng.uniform(0.0, width - w)
        y0 = rng.uniform(0.0, height - h)
        return x0, y0, w, h

    def __call__(self, rgb: np.ndarray, rng: np.random.Generator, other: np.ndarray | None = None) -> Tensor:
        """Augment one RGB uint8 crop (H, W, 3); ``other`` is another sample's crop for patch backgrounds.

        The same ``rng`` state always gives the same output.  Every draw below is made unconditionally in a
        fixed order, so a flag's value never shifts the later random numbers.
        """
        if rgb.ndim != 3 or rgb.shape[2] != 3:
            raise ValueError(f"expected an (H, W, 3) image, got shape {rgb.shape}")
        height, width = rgb.shape[:2]
        img = rgb.astype(np.float32)

        # 1. background behind the head
        bg_draw = rng.random()
        bg_seed = int(rng.integers(2**31))
        if bg_draw < self.background_p:
            background = random_background(height, width, np.random.default_rng(bg_seed), other)
            img = replace_background(img, background, self.mask(height, width))

        # 2. random resized crop
        x0, y0, w, h = self.crop_window(height, width, rng)
        sx, sy = self.size / w, self.size / h
        m = np.array([[sx, 0.0, -x0 * sx], [0.0, sy, -y0 * sy]], dtype=np.float32)
        interp = cv2.INTER_AREA if min(sx, sy) < 1 else cv2.INTER_LINEAR
        if interp == cv2.INTER_AREA:  # warpAffine has no area filter: shrink first, then place exactly
            shrink = cv2.resize(img, (max(1, round(width * sx)), max(1, round(height * sy))), interpolation=cv2.INTER_AREA)
            fx, fy = shrink.shape[1] / width, shrink.shape[0] / height
            m = np.array([[sx / fx, 0.0, -x0 * sx], [0.0, sy / fy, -y0 * sy]], dtype=np.float32)
            img = shrink
        img = cv2.warpAffine(img, m, (self.size, self.size), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT_101)

        # 3. horizontal flip
        if rng.random() < self.flip_p:
            img = img[:, ::-1]

        # 4. colour jitter (light), in a random order of the three operations
        factors = rng.uniform(1.0 - self.jitter, 1.0 + self.jitter, size=3)
        order = rng.permutation(3)
        for op in order:
            f = float(factors[op])
            if op == 0:  # brightness
                img = img * f
            elif op == 1:  # contrast around the mean grey level
                grey = float((img @ np.array([0.299, 0.587, 0.114], np.float32)).mean())
                img = (img - grey) * f + grey
            else:  # saturation around the per-pixel grey
                grey = (img @ np.array([0.299, 0.587, 0.114], np.float32))[..., None]
                img = (img - grey) * f + grey
            img = np.clip(img, 0.0, 255.0)
        return torch.from_numpy(pixels_to_input(img))

"""Synthetic look changes on a head crop, for FITTING ONLY (research/fit_head_regions.py): drawn glasses, a drawn
moustache and beard, and a recoloured hair region. They stand in for the other-look (R2) pairs that the permissive
data lacks (only Obama's two labelled states give real ones). They are crude on purpose: placed from the crop's
five RetinaFace landmarks and face box, no learning. Whether fitting on them helps is measured on real held-out looks.

Every function takes a `headsearch.detection.crops.HeadCrop` with landmarks and a numpy Generator and returns a new RGB image
of the same size (the face box and landmarks stay valid: nothing moves).
"""
from __future__ import annotations

import contextlib

import cv2
import numpy as np

KINDS = ("glasses", "beard", "hair")


def _pt(p) -> tuple[int, int]:
    return int(round(float(p[0]) * 16)), int(round(float(p[1]) * 16))  # 4 fractional bits for cv2 (shift=4)


def glasses(crop, rng: np.random.Generator) -> np.ndarray:
    """Two lens rims around the eyes, a bridge and the start of the temples; lightly tinted lenses (dark ones with
    probability 0.3: sunglasses)."""
    img = crop.image.copy()
    le, re = crop.landmarks[0].astype(np.float64), crop.landmarks[1].astype(np.float64)
    d = float(np.linalg.norm(re - le))
    u = (re - le) / max(d, 1e-6)
    angle = float(np.degrees(np.arctan2(u[1], u[0])))
    ax = (int(round(0.44 * d * 16)), int(round(0.32 * d * 16)))
    colour = [(18, 18, 18), (70, 40, 22), (110, 110, 115)][rng.integers(3)]
    thick = max(2, int(round(0.07 * d)))
    dark = rng.random() < 0.3
    lens = img.copy()
    for c in (le, re):
        cv2.ellipse(lens, _pt(c), ax, angle, 0, 360, (25, 25, 30) if dark else (200, 210, 220), -1, cv2.LINE_AA, 4)
    img = cv2.addWeighted(lens, 0.75 if dark else 0.12, img, 0.25 if dark else 0.88, 0)
    for c in (le, re):
        cv2.ellipse(img, _pt(c), ax, angle, 0, 360, colour, thick, cv2.LINE_AA, 4)
    cv2.line(img, _pt(le + u * 0.44 * d), _pt(re - u * 0.44 * d), colour, thick, cv2.LINE_AA, 4)
    cv2.line(img, _pt(le - u * 0.44 * d), _pt(le - u * 0.95 * d), colour, thick, cv2.LINE_AA, 4)
    cv2.line(img, _pt(re + u * 0.44 * d), _pt(re + u * 0.95 * d), colour, thick, cv2.LINE_AA, 4)
    return img


def _paint(img: np.ndarray, mask: np.ndarray, colour: np.ndarray, rng: np.random.Generator, opacity: float) -> np.ndarray:
    """Blend a hair-like texture (colour plus blurred noise) into `img` where the feathered `mask` is set."""
    h, w = mask.shape
    noise = cv2.GaussianBlur(rng.normal(0.0, 28.0, (h, w)).astype(np.float32), (0, 0), 0.8)
    texture = np.clip(colour[None, None, :] + noise[..., None], 0, 255)
    side = max(3, int(round(0.012 * w)) | 1)
    alpha = cv2.GaussianBlur(mask.astype(np.float32), (side, side), 0)[..., None] * opacity
    return np.clip(img * (1 - alpha) + texture * alpha, 0, 255).astype(np.uint8)


def beard(crop, rng: np.random.Generator) -> np.ndarray:
    """A moustache between nose and upper lip and a beard along the jaw below the mouth (lips left free)."""
    img = crop.image.copy()
    lm = crop.landmarks.astype(np.float64)
    nose, ml, mr = lm[2], lm[3], lm[4]
    mw = float(np.linalg.norm(mr - ml))
    mouth = (ml + mr) / 2
    fb = crop.face_box
    mask = np.zeros(img.shape[:2], np.uint8)
    drop = mouth[1] - nose[1]
    moustache = np.array([ml + (-0.15 * mw, 0.02 * mw), nose + (-0.45 * mw, 0.30 * drop), nose + (0.45 * mw, 0.30 * drop),
                          mr + (0.15 * mw, 0.02 * mw), mr + (0.0, -0.10 * mw), ml + (0.0, -0.10 * mw)])
    cv2.fillPoly(mask, [np.round(moustache).astype(np.int32)], 1)
    if rng.random() < 0.75:  # with a beard
        cx = mouth[0]
        jaw = np.array([(fb.x1 + 0.06 * fb.width, nose[1]), (fb.x1 + 0.12 * fb.width, fb.y2 - 0.12 * fb.height),
                        (cx, fb.y2 + 0.03 * fb.height), (fb.x2 - 0.12 * fb.width, fb.y2 - 0.12 * fb.height),
                        (fb.x2 - 0.06 * fb.width, nose[1]), mr + (0.25 * mw, 0.0), mr + (0.15 * mw, 0.30 * mw),
                        ml + (-0.15 * mw, 0.30 * mw), ml + (-0.25 * mw, 0.0)])
        cv2.fillPoly(mask, [np.round(jaw).astype(np.int32)], 1)
        cv2.ellipse(mask, _pt(mouth + (0, 0.05 * mw)), (int(0.55 * mw * 16), int(0.22 * mw * 16)), 0, 0, 360, 0, -1, cv2.LINE_AA, 4)
    colour = np.array([(45, 35, 30), (90, 65, 45), (150, 145, 140), (30, 30, 30)][rng.integers(4)], np.float32)
    return _paint(img, mask, colour, rng, 0.85)


def hair(crop, rng: np.random.Generator) -> np.ndarray:
    """Recolour the hair: inside the head ellipse, above the forehead and beside the face down to the nose, the pixels
    whose colour is near (Lab distance < 28) the median of a seed patch just above the face box; dark hair to blond
    or grey, light hair to dark brown. Approximate: background of the hair's colour changes too."""
    from headsearch.models.sface_hsv import head_mask

    img = crop.image.copy()
    size = img.shape[0]
    fb = crop.face_box
    nose_y = float(crop.landmarks[2][1])
    ys, xs = np.mgrid[0:size, 0:size]
    top = ys < fb.y1 + 0.10 * fb.height
    sides = ((xs < fb.x1 + 0.06 * fb.width) | (xs > fb.x2 - 0.06 * fb.width)) & (ys < nose_y)
    region = (head_mask(size) > 0) & (top | sides)
    lab = cv2.cvtColor(img, cv2.COLOR_RGB2LAB).astype(np.float32)
    cx = (fb.x1 + fb.x2) / 2
    y1, y2 = int(max(0, fb.y1 - 0.12 * fb.height)), int(max(1, fb.y1 - 0.01 * fb.height))
    x1, x2 = int(max(0, cx - 0.2 * fb.width)), int(min(size, cx + 0.2 * fb.width))
    seed = np.median(lab[y1:max(y2, y1 + 1), x1:max(x2, x1 + 1)].reshape(-1, 3), axis=0)
    near = np.linalg.norm(lab - seed, axis=2) < 28
    mask = (region & near).astype(np.uint8)
    mask = cv2.morphologyEx(mask, cv2.MORPH_OPEN, np.ones((3, 3), np.uint8)).astype(np.float32)
    mask = cv2.GaussianBlur(mask, (0, 0), 0.006 * size)[..., None]
    hsv = cv2.cvtColor(img, cv2.COLOR_RGB2HSV).astype(np.float32)
    if seed[0] < 120 * 255 / 100 * 0.45:  # dark hair (L* below ~45): to blond (hue ~ 22 deg) or grey
        if rng.random() < 0.6:
            hsv[..., 0], hsv[..., 1], hsv[..., 2] = 11.0, 0.4 * hsv[..., 1] + 70, np.minimum(255, 0.5 * hsv[..., 2] + 120)
        else:
            hsv[..., 1], hsv[..., 2] = 0.15 * hsv[..., 1], np.minimum(255, 0.4 * hsv[..., 2] + 110)
    else:  # light hair: to dark brown
        hsv[..., 0], hsv[..., 1], hsv[..., 2] = 10.0, 0.5 * hsv[..., 1] + 40, 0.3 * hsv[..., 2]
    recoloured = cv2.cvtColor(np.clip(hsv, 0, 255).astype(np.uint8), cv2.COLOR_HSV2RGB).astype(np.float32)
    return np.clip(img * (1 - mask) + recoloured * mask, 0, 255).astype(np.uint8)


def make(crop, kind: str, rng: np.random.Generator) -> np.ndarray:
    return {"glasses": glasses, "beard": beard, "hair": hair}[kind](crop, rng)


# ---------------------------------------------------------------------------------------------------- scene randomisation

def foreground_mask(crop, iterations: int = 4) -> np.ndarray:
    """(S, S) float32 in [0, 1]: the head and shoulders by OpenCV GrabCut (no model), seeded with the face box as
    sure foreground, the crop's top corners and outer rim as sure background, the rest probable; feathered."""
    img = crop.image
    size = img.shape[0]
    fb = crop.face_box
    mask = np.full((size, size), cv2.GC_PR_BGD, np.uint8)
    ys, xs = np.mgrid[0:size, 0:size]
    cx, cy = (fb.x1 + fb.x2) / 2, (fb.y1 + fb.y2) / 2
    # probable foreground: an ellipse around the face a bit larger than the head, and the region below it (shoulders)
    head = ((xs - cx) / (0.85 * fb.width)) ** 2 + ((ys - (cy - 0.15 * fb.height)) / (0.85 * fb.height)) ** 2 < 1
    body = (ys > fb.y2) & (np.abs(xs - cx) < 1.2 * fb.width)
    mask[head | body] = cv2.GC_PR_FGD
    core = (np.abs(xs - cx) < 0.3 * fb.width) & (ys > fb.y1 + 0.2 * fb.height) & (ys < fb.y2 - 0.1 * fb.height)
    mask[core] = cv2.GC_FGD
    rim = 4
    mask[:rim, :], mask[:, :rim], mask[:, -rim:] = cv2.GC_BGD, cv2.GC_BGD, cv2.GC_BGD
    mask[:int(fb.y2), :rim * 3], mask[:int(fb.y2), -rim * 3:] = cv2.GC_BGD, cv2.GC_BGD
    bgd, fgd = np.zeros((1, 65), np.float64), np.zeros((1, 65), np.float64)
    with contextlib.suppress(cv2.error):
        cv2.grabCut(cv2.cvtColor(img, cv2.COLOR_RGB2BGR), mask, None, bgd, fgd, iterations, cv2.GC_INIT_WITH_MASK)
    fg = np.isin(mask, (cv2.GC_FGD, cv2.GC_PR_FGD)).astype(np.uint8)
    n, labels, stats, _ = cv2.connectedComponentsWithStats(fg)
    if n > 1:  # keep the component holding the face centre
        keep = labels[int(np.clip(cy, 0, size - 1)), int(np.clip(cx, 0, size - 1))]
        fg = (labels == keep).astype(np.uint8) if keep else fg
    return cv2.GaussianBlur(fg.astype(np.float32), (0, 0), 1.5)


def background(kind: int, size: int, rng: np.random.Generator, donor: np.ndarray | None = None) -> np.ndarray:
    """A replacement background: 0 flat colour, 1 linear gradient of two colours, 2 a donor image mirrored and blurred
    (natural colour statistics without a face), 3 blurred, muted coloured noise."""
    if kind == 0:
        return np.broadcast_to(rng.uniform(20, 235, 3).astype(np.float32), (size, size, 3)).copy()
    if kind == 1:
        a, b = rng.uniform(10, 245, 3), rng.uniform(10, 245, 3)
        t = np.linspace(0, 1, size, dtype=np.float32)
        t = t[:, None] if rng.random() < 0.5 else t[None, :]
        t = np.broadcast_to(t, (size, size))[..., None]
        return (a * (1 - t) + b * t).astype(np.float32)
    if kind == 2 and donor is not None:
        d = cv2.flip(donor, -1).astype(np.float32)
        return cv2.GaussianBlur(d, (0, 0), 6.0)
    noise = rng.uniform(0, 255, (6, 6, 3)).astype(np.float32)
    noise = 0.4 * noise + 0.6 * noise.mean(axis=2, keepdims=True)  # muted colours
    return cv2.GaussianBlur(cv2.resize(noise, (size, size), interpolation=cv2.INTER_CUBIC), (0, 0), 8.0).clip(0, 255)


def photometric(img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Camera-to-camera variation: exposure, contrast, white balance, gamma; sometimes blur and JPEG."""
    x = img.astype(np.float32) / 255.0
    x = x * rng.uniform(0.75, 1.25) * rng.uniform(0.9, 1.1, 3)
    m = x.mean()
    x = (x - m) * rng.uniform(0.8, 1.2) + m
    x = np.clip(x, 0, 1) ** rng.uniform(0.8, 1.25)
    out = (x * 255).clip(0, 255).astype(np.uint8)
    if rng.random() < 0.5:
        out = cv2.GaussianBlur(out, (0, 0), rng.uniform(0.5, 1.5))
    if rng.random() < 0.5:
        ok, buf = cv2.imencode(".jpg", out, [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(40, 91))])
        out = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
    return out


def randomise(img: np.ndarray, fg: np.ndarray, bg: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
    """`img` with the background (1 - fg) replaced by `bg` (None: kept), then `photometric`."""
    if bg is not None:
        a = fg[..., None]
        img = (img.astype(np.float32) * a + bg * (1 - a)).clip(0, 255).astype(np.uint8)
    return photometric(img, rng)

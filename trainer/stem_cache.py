"""Cached stem features: while a hybrid model's pretrained stem is frozen, its output for a sample never changes,
so it is computed once per sample and *view* and training runs the projection, the blocks and the heads only.

View 0 is the evaluation preprocessing, view 1 its mirror image, views 2.. are the training augmentation
(`trainer.augment.HeadAugment`: background randomisation, random resized crop, flip, colour jitter) drawn with a
seed of (seed, sample, view). A training slot picks one of the views from its own augmentation seed;
validation uses view 0.

The cache is ``<run folder>/stem_cache.npy`` (float16, samples x views x C x H x W, memory-mapped) with
``stem_cache.json`` naming what it holds; it is filled in chunks and a rerun (``--resume``) continues where the
last chunk ended.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from headsearch.basics.files import write_json_atomic
from headsearch.basics.images import read_image_rgb
from trainer.augment import HeadAugment, eval_transform

CACHE = "stem_cache.npy"
CACHE_INFO = "stem_cache.json"
CHUNK = 32


def view_input(rgb: np.ndarray, view: int, size: int, augment: HeadAugment, seed: int, sample: int,
               other: np.ndarray | None) -> torch.Tensor:
    """The model input of one view of a sample (see the module docstring)."""
    if view == 0:
        return eval_transform(rgb, size)
    if view == 1:
        return torch.flip(eval_transform(rgb, size), dims=[2])
    return augment(rgb, np.random.default_rng([seed, sample, view, 0x57E]), other)


def build_stem_cache(out: Path, root: Path, crops: list[str], views: int, model, size: int, augment: HeadAugment, seed: int,
                     key: dict, progress: Callable | None = None) -> np.ndarray:
    """The (n, views, C, H, W) float16 stem features of the crops (relative paths under root), filled as needed."""
    path, info_path = out / CACHE, out / CACHE_INFO
    n = len(crops)
    with torch.no_grad():
        probe = model.stem_features(torch.zeros(1, 3, size, size))
    shape = (n, views, *probe.shape[1:])
    info = {"key": key, "shape": list(shape), "done": 0}
    try:
        old = json.loads(info_path.read_text())
        if old.get("key") == key and tuple(old.get("shape", ())) == shape and path.is_file():
            info["done"] = int(old["done"])
    except (OSError, ValueError):
        pass
    mode = "r+" if info["done"] else "w+"
    cache = np.lib.format.open_memmap(path, mode=mode, dtype=np.float16, shape=shape)
    if info["done"] >= n:
        return cache
    was_training = model.training
    model.eval()
    bar = progress(total=n, initial=info["done"], desc="stem features", unit="crop") if progress else None
    try:
        for start in range(info["done"], n, CHUNK):
            stop = min(n, start + CHUNK)
            images = [read_image_rgb(root / crops[i]) for i in range(start, stop)]
            batch = []
            for k, rgb in enumerate(images):
                other = images[(k + 1) % len(images)]  # another sample of the chunk, for patch backgrounds
                batch.extend(view_input(rgb, v, size, augment, seed, start + k, other) for v in range(views))
            with torch.no_grad():
                feats = model.stem_features(torch.stack(batch)).numpy().astype(np.float16)
            cache[start:stop] = feats.reshape(stop - start, views, *feats.shape[1:])
            cache.flush()
            info["done"] = stop
            write_json_atomic(info_path, info)
            if bar is not None:
                bar.update(stop - start)
    finally:
        if bar is not None:
            bar.close()
        model.train(was_training)
    return cache

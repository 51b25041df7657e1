"""Embedders: head crops in, L2-normalised vectors out. Load one by name or path with `load_embedder`;
add one as a module that registers itself (see `registry`).

The names below are imported when first used, so that importing a light module of this package
(`head_config`, for the train command's help) costs no OpenCV and no registry."""
from __future__ import annotations

import importlib

_HOMES = {"Embedder": "base", "ModelSpec": "base", "align_face": "base", "l2_normalise": "base", "mean_vector": "base",
          "DEFAULT_MODEL": "registry", "available_models": "registry", "load_embedder": "registry",
          "register_model": "registry", "register_path_loader": "registry"}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)

"""Embedders: head crops in, L2-normalised vectors out. Load one by name or path with `load_embedder`;
add one as a module that registers itself (see `registry`)."""
from headsearch.models.base import Embedder, align_face, l2_normalise, mean_vector
from headsearch.models.registry import DEFAULT_MODEL, available_models, load_embedder, register_model, register_path_loader

__all__ = ["DEFAULT_MODEL", "Embedder", "align_face", "available_models", "l2_normalise", "load_embedder", "mean_vector",
           "register_model", "register_path_loader"]

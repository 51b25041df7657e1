"""Embedders by name or by path, timm's `register_model` style: a new embedder is one module that
registers a named factory (`@register_model("name")`) or a loader for model files it recognises
(`@register_path_loader(...)`). Built-in modules are listed below; other packages add theirs
through the `headsearch.models` entry-point group (the entry point names the module to import)."""
from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

from headsearch.basics.errors import ModelError
from headsearch.models.base import Embedder

log = logging.getLogger(__name__)

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"  # model files, licences and thresholds shipped in the package
DEFAULT_MODEL = "sface"  # what `--model default` (or no --model) loads; its thresholds ship in headsearch/models/
ENTRY_POINT_GROUP = "headsearch.models"
BUILTIN_MODULES = (
    "headsearch.models.dlib_resnet",
    "headsearch.models.sface",
    "headsearch.models.sface_hsv",
    "headsearch.models.arcface_onnx",
    "headsearch.models.head_similarity",
)


@dataclass(frozen=True)
class PathLoader:
    description: str  # what files it loads, for error messages
    matches: Callable[[Path], bool]
    load: Callable[[Path], Embedder]


_named: dict[str, Callable[[], Embedder]] = {}
_path_loaders: list[PathLoader] = []
_loaded = False


def register_model(name: str) -> Callable[[Callable[[], Embedder]], Callable[[], Embedder]]:
    """Register a factory that builds the embedder called `name` (no arguments)."""
    def decorate(factory: Callable[[], Embedder]) -> Callable[[], Embedder]:
        if name in _named and _named[name] is not factory:
            raise ValueError(f"model name {name!r} is registered twice")
        _named[name] = factory
        return factory
    return decorate


def register_path_loader(description: str, matches: Callable[[Path], bool]) -> Callable[[Callable[[Path], Embedder]], Callable[[Path], Embedder]]:
    """Register a loader for model files or folders that `matches` recognises."""
    def decorate(load: Callable[[Path], Embedder]) -> Callable[[Path], Embedder]:
        _path_loaders.append(PathLoader(description, matches, load))
        return load
    return decorate


def _load_modules() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in BUILTIN_MODULES:
        importlib.import_module(module)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as e:  # a broken plugin must not break the built-in models
            log.warning("model plugin %s (%s) failed to load: %s", ep.name, ep.value, e)


def available_models() -> list[str]:
    """Registered model names."""
    _load_modules()
    return sorted(_named)


def load_embedder(spec: str | None) -> Embedder:
    """An embedder by registered name (`default` names DEFAULT_MODEL) or by a local path."""
    _load_modules()
    spec = DEFAULT_MODEL if spec in (None, "", "default") else str(spec)
    if spec in _named:
        return _named[spec]()
    path = Path(spec).expanduser()
    for loader in _path_loaders:
        if loader.matches(path):
            return loader.load(path)
    if not path.exists():
        if "/" in spec or "." in spec:
            raise ModelError(f"missing model file: {path}")
        kinds = ", ".join(loader.description for loader in _path_loaders)
        raise ModelError(f"unknown model {spec!r}: use {', '.join(available_models())}, {kinds}")
    raise ModelError(f"{path}: not a model this version can load")

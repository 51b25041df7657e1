"""The model registry, timm's `register_model` style: each model is described once, by a `ModelSpec`,
and registered with the factory that builds it from that spec (`@register_model(ModelSpec(...))`), or, for
model files users bring, with a loader and the test that recognises its files (`@register_path_loader(spec,
matches)`): the loader is given its family's spec and the file, and the embedder it returns carries the file's
own spec, derived from the family's with what only the file says (its name, kinds, widths).

Everything that needs to know what a model is reads its spec: `--model` help, `headsearch models`,
the thresholds shipped with it, people's grouping without calibrated thresholds, the dataset builder's
identity clustering, which sightings get a vector (`sees_whole_head`), and the extra it needs.
Built-in modules are listed below; other packages add theirs through the `headsearch.models`
entry-point group (the entry point names the module to import).
"""
from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from headsearch.basics.errors import ModelError
from headsearch.models.base import Embedder, Factory, ModelSpec
from schemas.records import ModelInfo

log = logging.getLogger(__name__)

DEFAULT_MODEL = "sface+lite0"  # what `--model default` (or no --model) loads
ENTRY_POINT_GROUP = "headsearch.models"
BUILTIN_MODULES = (
    "headsearch.models.sface",
    "headsearch.models.sface_hsv",
    "headsearch.models.whole_head",
    "headsearch.models.dlib_resnet",
    "headsearch.models.arcface_onnx",
    "headsearch.models.head_similarity",
)
FileLoader = Callable[[ModelSpec, Path], Embedder]  # builds the embedder of one file from its family's spec


@dataclass(frozen=True)
class PathLoader:
    """Model files of one family: how to recognise them, their spec, how to load one (given the family's spec and the file)."""

    spec: ModelSpec
    matches: Callable[[Path], bool]
    load: FileLoader


_named: dict[str, ModelSpec] = {}
_path_loaders: list[PathLoader] = []
_loaded = False
_plugins_loaded = False


def register_model(spec: ModelSpec) -> Callable[[Factory], Factory]:
    """Register the factory that builds the model `spec` describes from that spec, under its name and aliases."""
    def decorate(factory: Factory) -> Factory:
        for name in spec.registered_names:
            if name in _named and _named[name].load is not factory:
                raise ValueError(f"model name {name!r} is registered twice")
            _named[name] = replace(spec, load=factory)
        return factory
    return decorate


def register_path_loader(spec: ModelSpec, matches: Callable[[Path], bool]) -> Callable[[FileLoader], FileLoader]:
    """Register a loader for the model files or folders that `matches` recognises: `load(spec, path)` is given their
    family's spec and builds the embedder of one file, whose spec is the family's with the file's own facts."""
    def decorate(load: FileLoader) -> FileLoader:
        _path_loaders.append(PathLoader(spec, matches, load))
        return load
    return decorate


def _load_modules(plugins: bool = True) -> None:
    """The built-in models' modules, then (`plugins`) the plugins' entry points, which cost a scan of every
    installed distribution: looking up a built-in model does without them."""
    global _loaded, _plugins_loaded
    if not _loaded:
        _loaded = True
        for module in BUILTIN_MODULES:
            importlib.import_module(module)
    if not plugins or _plugins_loaded:
        return
    _plugins_loaded = True
    from importlib.metadata import entry_points  # about 30 ms: a query of a built-in model's library does without it

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as e:  # a broken plugin must not break the built-in models
            log.warning("model plugin %s (%s) failed to load: %s", ep.name, ep.value, e)


def available_models() -> list[str]:
    """Registered model names (aliases included)."""
    _load_modules()
    return sorted(_named)


def model_specs() -> list[ModelSpec]:
    """Every registered model once, then the families of model files, in registration order."""
    _load_modules()
    named = list({id(s.load): s for s in _named.values()}.values())
    return named + [p.spec for p in _path_loaders]


def _resolve(spec: str | None) -> str:
    return DEFAULT_MODEL if spec in (None, "", "default") else str(spec)


def _registered(name: str) -> ModelSpec | None:
    """The spec registered under `name`: the built-in models first, the plugins' entry points scanned only for a
    name that is not built in (or for a model file, which a plugin's path loader may recognise)."""
    _load_modules(plugins=False)
    if name not in _named:
        _load_modules()
    return _named.get(name)


def find_spec(model: str | ModelInfo | None) -> ModelSpec | None:
    """The spec of a registered name, of a model file, or of the model a library names (by name, then by its source)."""
    if isinstance(model, ModelInfo):
        return _registered(model.name) or find_spec(model.source)
    key = _resolve(model)
    if (spec := _registered(key)) is not None:
        return spec
    path = Path(key).expanduser()
    return next((loader.spec for loader in _path_loaders if loader.matches(path)), None)


def choices_line() -> str:
    """What `--model` accepts, in one line."""
    names = [f"default (= {DEFAULT_MODEL})"] + [s.name for s in model_specs() if s.load is not None]
    return "use " + ", ".join(dict.fromkeys(names)) + ", or " + ", ".join(p.spec.summary for p in _path_loaders)


def load_embedder(spec: str | None) -> Embedder:
    """An embedder by registered name (`default` names DEFAULT_MODEL), built from its spec, or by a local path."""
    key = _resolve(spec)
    if (model := _registered(key)) is not None:
        return model.load(model)
    path = Path(key).expanduser()
    for loader in _path_loaders:
        if loader.matches(path):
            return loader.load(loader.spec, path)
    if not path.exists():
        if "/" in key or "." in key:
            raise ModelError(f"missing model file: {path}")
        raise ModelError(f"unknown model {key!r}: {choices_line()}")
    raise ModelError(f"{path}: not a model this version can load")

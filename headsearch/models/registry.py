"""The model registry, timm's `register_model` style: each model is described once, by a `ModelSpec`,
and registered with the factory that builds it (`@register_model(ModelSpec(...))`), or, for model files
users bring, with a loader and the test that recognises its files (`@register_path_loader(spec, matches)`).

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
from dataclasses import dataclass, field, replace
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING

from headsearch.basics.errors import ModelError
from schemas.records import ModelInfo, VectorKind

if TYPE_CHECKING:
    from headsearch.models.base import Embedder

log = logging.getLogger(__name__)

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"  # model files, licences, cards and thresholds shipped in the package
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


@dataclass(frozen=True)
class ModelSpec:
    """What a model is, said once."""

    name: str  # the registered name (`--model NAME`), or a family name for models loaded from files
    summary: str  # one line: what it is (help texts, `headsearch models`)
    kinds: tuple[VectorKind, ...] = (VectorKind.ID,)  # the vectors it gives each embedded sighting
    dims: tuple[int, ...] = ()  # the width of each kind, in `kinds` order (empty: known once the file is loaded)
    sees_whole_head: bool = False  # a meaningful vector for a sighting without a visible face (profile, back of the head)
    input: str = ""  # what it is fed: the input recipe
    licence: str = ""  # of its weights
    extra: str | None = None  # the pip extra it needs beyond the lean install (`train`: PyTorch)
    aliases: tuple[str, ...] = ()
    thresholds: str | None = None  # shipped thresholds: a file in WEIGHTS_DIR (path-loaded models: `<file>.thresholds.json`)
    cluster_threshold: float | None = None  # cosine of best-face vectors at which the dataset builder joins segments
    people_threshold: float | None = None  # identity threshold of people's grouping when no thresholds are calibrated
    appearance_dims: int = 0  # the head vector's last dims describe the head without the face: compared alone when a side has no face
    fusion: str = ""  # how the head vector's parts are weighted, in words
    load: Callable[[], Embedder] | None = field(default=None, compare=False, repr=False)

    @property
    def registered_names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    def thresholds_path(self, source: str | None = None) -> Path | None:
        """Where its shipped thresholds are: in the package for a registered model, beside the file for a model loaded from one."""
        if self.thresholds:
            return WEIGHTS_DIR / self.thresholds
        if source and Path(source).expanduser().is_file():
            path = Path(source).expanduser()
            return path.with_name(path.name + ".thresholds.json")
        return None

    def to_dict(self) -> dict:
        return {"name": self.name, "summary": self.summary, "kinds": [str(k) for k in self.kinds], "dims": list(self.dims),
                "sees_whole_head": self.sees_whole_head, "input": self.input, "licence": self.licence, "extra": self.extra,
                "aliases": list(self.aliases), "thresholds": self.thresholds, "cluster_threshold": self.cluster_threshold,
                "people_threshold": self.people_threshold, "appearance_dims": self.appearance_dims, "fusion": self.fusion,
                "loads_from": "name" if self.load is not None else "file"}


@dataclass(frozen=True)
class PathLoader:
    """Model files of one family: how to recognise them, their spec, how to load one."""

    spec: ModelSpec
    matches: Callable[[Path], bool]
    load: Callable[[Path], Embedder]


_named: dict[str, ModelSpec] = {}
_path_loaders: list[PathLoader] = []
_loaded = False
_plugins_loaded = False


def register_model(spec: ModelSpec) -> Callable[[Callable[[], Embedder]], Callable[[], Embedder]]:
    """Register the factory that builds the model `spec` describes (no arguments), under its name and aliases."""
    def decorate(factory: Callable[[], Embedder]) -> Callable[[], Embedder]:
        for name in spec.registered_names:
            if name in _named and _named[name].load is not factory:
                raise ValueError(f"model name {name!r} is registered twice")
            _named[name] = replace(spec, load=factory)
        return factory
    return decorate


def register_path_loader(spec: ModelSpec, matches: Callable[[Path], bool]) -> Callable[[Callable[[Path], Embedder]], Callable[[Path], Embedder]]:
    """Register a loader for the model files or folders that `matches` recognises (their family's spec)."""
    def decorate(load: Callable[[Path], Embedder]) -> Callable[[Path], Embedder]:
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
    """An embedder by registered name (`default` names DEFAULT_MODEL) or by a local path, checked against its spec."""
    key = _resolve(spec)
    if (model := _registered(key)) is not None:
        return _checked(model, model.load())
    path = Path(key).expanduser()
    for loader in _path_loaders:
        if loader.matches(path):
            return _checked(loader.spec, loader.load(path))
    if not path.exists():
        if "/" in key or "." in key:
            raise ModelError(f"missing model file: {path}")
        raise ModelError(f"unknown model {key!r}: {choices_line()}")
    raise ModelError(f"{path}: not a model this version can load")


def _checked(spec: ModelSpec, embedder: Embedder) -> Embedder:
    """The embedder, said by its spec to be what it is; a drift between the two is a bug, said loudly."""
    embedder.spec = spec
    if spec.dims and (tuple(embedder.kinds) != spec.kinds or tuple(embedder.dims[k] for k in spec.kinds) != spec.dims):
        raise ModelError(f"model {spec.name}: gives {embedder.dims} but its spec says {dict(zip(spec.kinds, spec.dims, strict=True))}")
    if embedder.sees_whole_head != spec.sees_whole_head:
        raise ModelError(f"model {spec.name}: sees_whole_head {embedder.sees_whole_head} but its spec says {spec.sees_whole_head}")
    return embedder

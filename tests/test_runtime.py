"""ONNX Runtime sessions: a model's optimised graph saved once per file, onnxruntime version and CPU, and what a
damaged or unwritable cache does."""
from __future__ import annotations

import os
import shutil

import cv2
import numpy as np
import onnxruntime as ort
import pytest
from conftest import AMY_DIR, needs_data

from headsearch.basics import runtime
from headsearch.models.base import WEIGHTS_DIR
from headsearch.models.whole_head import LITE0_FILE

pytestmark = [needs_data, pytest.mark.slow]  # a copy of the shipped EfficientNet-Lite0 fed a real photo
LITE0_WEIGHTS = WEIGHTS_DIR / LITE0_FILE


def _photo_input(session) -> dict[str, np.ndarray]:
    """A real photo as the model's input (NHWC, its size, its dtype)."""
    spec = session.get_inputs()[0]
    _, height, width, _ = spec.shape
    rgb = cv2.cvtColor(cv2.imread(str(AMY_DIR / "amy1.png")), cv2.COLOR_BGR2RGB)
    pixels = cv2.resize(rgb, (width, height)).astype(np.float32)[None]
    return {spec.name: pixels}


def _outputs(session, feed) -> list[np.ndarray]:
    return session.run(None, feed)


def _saved(cache) -> list:
    return sorted((cache / "models" / runtime.OPTIMIZED).glob("*.onnx"))


def test_a_session_starts_from_its_saved_optimised_graph_with_the_same_outputs(tmp_path, monkeypatch):
    monkeypatch.setenv("HEADSEARCH_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "lite0.onnx"
    shutil.copy(LITE0_WEIGHTS, model)
    plain = ort.InferenceSession(str(model), runtime.session_options(1), providers=[runtime.CPU])
    feed = _photo_input(plain)
    expected = _outputs(plain, feed)

    first = runtime._cpu_session(model, 1)  # optimises the graph and saves it
    [saved] = _saved(tmp_path / "cache")
    again = runtime._cpu_session(model, 1)  # starts from the saved graph
    for session in (first, again):
        for got, want in zip(_outputs(session, feed), expected, strict=True):
            np.testing.assert_array_equal(got, want)

    saved.write_bytes(b"not a model")  # damaged: made and saved again
    damaged = runtime._cpu_session(model, 1)
    assert _saved(tmp_path / "cache") == [saved] and saved.stat().st_size > 1000
    np.testing.assert_array_equal(_outputs(damaged, feed)[0], expected[0])

    os.utime(model, ns=(1, 1))  # another version of the file: its own copy, the old one removed
    runtime._cpu_session(model, 1)
    [renewed] = _saved(tmp_path / "cache")
    assert renewed != saved


def test_an_unwritable_cache_still_gives_a_session(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv("HEADSEARCH_CACHE", str(blocker))
    session = runtime._cpu_session(LITE0_WEIGHTS, 1)
    feed = _photo_input(session)
    plain = ort.InferenceSession(str(LITE0_WEIGHTS), runtime.session_options(1), providers=[runtime.CPU])
    np.testing.assert_array_equal(_outputs(session, feed)[0], _outputs(plain, feed)[0])
    assert not list(tmp_path.glob("**/*.partial"))


def test_the_cache_keeps_the_copies_used_last(tmp_path, monkeypatch):
    monkeypatch.setenv("HEADSEARCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(runtime, "MAX_OPTIMIZED", 2)
    for i in range(3):  # three model files, each used a second after the one before
        model = tmp_path / f"model{i}.onnx"
        shutil.copy(LITE0_WEIGHTS, model)
        runtime._cpu_session(model, 1)
        [copy] = [p for p in _saved(tmp_path / "cache") if p.name.startswith(f"model{i}-")]
        os.utime(copy, (i + 1, i + 1))
    names = {p.name.split("-")[0] for p in _saved(tmp_path / "cache")}
    assert names == {"model1", "model2"}  # model0's copy, used least recently, removed

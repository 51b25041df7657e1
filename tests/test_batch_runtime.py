"""Batches on the faster CPU runtime: the first large batch runs a trial of ONNX Runtime against OpenVINO (in a process
of its own: tests/test_runtime_trial.py), saved per model file and machine; small batches and
HEADSEARCH_RUNTIME=onnxruntime never touch OpenVINO; both runtimes give SFace and Lite0 vectors of real faces that
agree; a missing, failing or disagreeing OpenVINO leaves ONNX Runtime."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import FACES, needs_data, run

from headsearch.basics import batch_runtime, runtime
from headsearch.basics.batch_runtime import ONNXRUNTIME, OPENVINO, TRIAL_ROWS, BatchRunner
from headsearch.detection.faces import FaceDetector
from headsearch.embedding.photo_heads import photo_heads, photo_pixels
from headsearch.models.sface import SFaceEmbedder, runtime_sface
from headsearch.models.whole_head import WholeHeadEmbedder
from schemas.records import VectorKind

pytestmark = [needs_data, pytest.mark.slow]  # the real SFace and Lite0 on real faces


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HEADSEARCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(batch_runtime.RUNTIME_ENV, raising=False)
    return tmp_path / "cache" / "models" / batch_runtime.CHOICES


@pytest.fixture(scope="module")
def crops():
    """Head crops of 16 real photos (several people), as the indexer embeds them."""
    photos = sorted(p for p in FACES.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))[:40]
    detector, embedder = FaceDetector(), SFaceEmbedder()
    found = []
    for p in photos:
        heads = photo_heads(photo_pixels(p), p, detector, embedder)
        found += [heads[0].crop] if heads and heads[0].crop.face_visible else []
    assert len(found) >= 16
    return found[:16]


def _faces(crops) -> np.ndarray:
    return SFaceEmbedder().faces(crops)


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_the_first_large_batch_runs_a_trial_that_later_runners_reuse(cache, crops):
    faces = _faces(crops)
    runner = BatchRunner(runtime_sface())
    plain = runner.session.run(None, {runner.input: faces})[0]
    runner.run(faces[: TRIAL_ROWS - 1])  # small: ONNX Runtime, no trial
    assert runner.runtime is None and not cache.exists()
    out = runner.run(faces)
    saved = list(cache.glob("*.json"))
    assert len(saved) == 1 and json.loads(saved[0].read_text()) == runner.trial
    assert runner.trial["runtime"] == runner.runtime in (ONNXRUNTIME, OPENVINO)
    assert runner.trial["outputs_agree"] and runner.trial["onnxruntime_ms"] > 0 and runner.trial["openvino_ms"] > 0
    assert _cosines(out, plain).min() > 0.99999
    assert batch_runtime.chosen()[runtime_sface().name]["runtime"] == runner.runtime

    for choice in (ONNXRUNTIME, OPENVINO):  # a saved choice is followed without a trial
        saved[0].write_text(json.dumps({**runner.trial, "runtime": choice}))
        later = BatchRunner(runtime_sface())
        got = later.run(faces)
        assert later.runtime == choice and (later._compiled is None) == (choice == ONNXRUNTIME)
        assert _cosines(got, plain).min() > 0.99999
        if choice == ONNXRUNTIME:
            np.testing.assert_array_equal(got, plain)

    saved[0].write_text("{not json")  # damaged: the trial runs again and saves a whole record
    again = BatchRunner(runtime_sface())
    again.run(faces)
    assert json.loads(saved[0].read_text())["runtime"] == again.runtime


def test_both_runtimes_give_the_same_vectors_of_real_faces(cache, crops, monkeypatch):
    vectors = {}
    for name in (ONNXRUNTIME, OPENVINO):
        monkeypatch.setenv(batch_runtime.RUNTIME_ENV, name)
        embedder = WholeHeadEmbedder()
        vectors[name] = embedder.embed(crops)
        assert embedder.sface.runner.runtime == embedder.appearance.runner.runtime == name
    for kind in (VectorKind.ID, VectorKind.HEAD):
        assert _cosines(vectors[ONNXRUNTIME][kind], vectors[OPENVINO][kind]).min() > 0.99999


def test_onnxruntime_alone_where_asked_or_where_openvino_is_missing(cache, crops, monkeypatch, caplog):
    faces = _faces(crops)
    monkeypatch.setenv(batch_runtime.RUNTIME_ENV, "onnxruntime")
    runner = BatchRunner(runtime_sface())
    runner.run(faces)
    assert runner.runtime == ONNXRUNTIME and runner._compiled is None and not cache.exists()

    monkeypatch.setitem(sys.modules, "openvino", None)  # not installed: importing it raises ImportError
    monkeypatch.setenv(batch_runtime.RUNTIME_ENV, "openvino")
    monkeypatch.setattr(runtime, "_said", set())
    with caplog.at_level(logging.WARNING, logger="headsearch.basics.runtime"):
        runner = BatchRunner(runtime_sface())
        out = runner.run(faces)
    assert runner.runtime == ONNXRUNTIME and out.shape == (len(faces), 128)
    assert "OpenVINO is not installed" in caplog.text


def test_openvino_outputs_that_disagree_or_fail_leave_onnxruntime(cache, crops, monkeypatch):
    faces = _faces(crops)
    infer = batch_runtime._Compiled.infer
    monkeypatch.setattr(batch_runtime._Compiled, "infer", lambda self, batch: infer(self, batch) * 1.01)
    times, said = batch_runtime._time_runtimes(runtime_sface(), 2, faces[:TRIAL_ROWS])  # the trial's process's work, here
    assert times["outputs_agree"] is False and times["openvino_ms"] > 0 and not said
    trial = batch_runtime._decide(runtime_sface(), 2, times, cache / "sface.json")
    assert trial["runtime"] == ONNXRUNTIME and trial["openvino_ms"] is None and json.loads((cache / "sface.json").read_text()) == trial

    def failing(self, batch):
        raise RuntimeError("an exception from OpenVINO's plugin")

    monkeypatch.setattr(batch_runtime._Compiled, "infer", failing)
    times, said = batch_runtime._time_runtimes(runtime_sface(), 2, faces[:TRIAL_ROWS])
    assert times["outputs_agree"] is False and times["openvino_ms"] is None and times["onnxruntime_ms"] > 0
    assert said == [f"{runtime_sface().name}: OpenVINO failed (an exception from OpenVINO's plugin); running on ONNX Runtime"]

    class Failing(BatchRunner):
        def _openvino(self, batch):
            raise RuntimeError("an exception from OpenVINO's plugin")

    monkeypatch.setenv(batch_runtime.RUNTIME_ENV, "openvino")
    runner = Failing(runtime_sface())
    out = runner.run(faces)  # chosen without a trial: the failure of its first batch hands over to ONNX Runtime
    assert runner.runtime == ONNXRUNTIME and out.shape == (len(faces), 128)


def test_a_wrong_runtime_setting_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv(batch_runtime.RUNTIME_ENV, "quantum")
    result = run("index", FACES / "amy" / "amy1.png", "--library", tmp_path / "lib", "-q", ok=False)
    assert "HEADSEARCH_RUNTIME" in result.output and "Traceback" not in result.output


CTRL_C_AFTER_OPENVINO = """
import os, signal, sys, threading, time
import numpy as np
from headsearch.basics.batch_runtime import BatchRunner
from headsearch.models.sface import runtime_sface
runners = [BatchRunner(runtime_sface())]
runners[0].run(np.zeros((8, 3, 112, 112), np.float32))  # OpenVINO runs, asked from the main thread
assert runners[0].runtime == "openvino", runners[0].runtime
threading.Thread(target=runners.clear).start()  # ...and is let go from another thread
time.sleep(0.5)
try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
except KeyboardInterrupt:
    sys.exit(0)
sys.exit(3)
"""


def test_a_ctrl_c_after_openvino_ran_and_was_let_go_is_a_keyboardinterrupt(tmp_path):
    """OpenVINO gives the thread it runs on an alternate signal stack, unmapped when the model is let go from another
    thread: a Ctrl-C delivered to the main thread then crashed the process (SIGSEGV) when OpenVINO ran there."""
    env = {**os.environ, batch_runtime.RUNTIME_ENV: OPENVINO, "HEADSEARCH_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", CTRL_C_AFTER_OPENVINO], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])

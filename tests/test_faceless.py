"""Heads that never show a face: the head benchmark on the labelled set, a person seen only from behind indexed
(tracks that start from person keypoints), listed with how each head was found, shown on the web pages, and
found again from a photo of the back of the head."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import pytest
from clips import frames_of, read_frames, write_clip
from conftest import DATA, HAMILTON, needs_data, query_json, run
from starlette.testclient import TestClient

from headsearch.basics.frames import frame_at
from headsearch.evaluation.thresholds import thresholds_for
from headsearch.store.library import Library
from serve.app import create_app

pytestmark = [needs_data, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
HEAD_SET = ROOT / "bench" / "sets" / "heads.csv"
CROWD = DATA / "facenet-pytorch" / "examples" / "video.mp4"
# In the walking crowd, a woman with grey hair walks away from the camera the whole clip (labelled `back`).
GREY_BACK = (1.04, (1500, 708, 1576, 778))


def test_bench_heads_on_the_labelled_set():
    out = run("bench", "heads", HEAD_SET, "--root", DATA, "--json", "-q").stdout
    d = json.loads(out)
    assert d["frames"] == 27 and d["heads"] == {"face": 57, "profile": 37, "back": 39}
    m = {name: r for name, r in d["methods"].items()}
    recall = {name: {v: r["recall"][v]["recall"] for v in ("face", "profile", "back")} for name, r in m.items()}
    precision = {name: r["precision"]["precision"] for name, r in m.items()}
    # RetinaFace alone (measured: face 0.825, profile 0.811, back 0, precision 0.963): no back of a head.
    assert recall["faces"]["back"] == 0.0 and 0.78 <= recall["faces"]["face"] <= 0.87 and precision["faces"] >= 0.93
    # The indexer before (faces + tracking; measured: back 0.026) and now (measured: face 0.912, profile 0.892,
    # back 0.410, precision 0.927): backs found by keypoints and followed, frontal recall not lower.
    assert recall["indexer-faces"]["back"] <= 0.1
    assert recall["indexer"]["back"] >= 0.33 and recall["indexer"]["profile"] >= 0.85
    assert recall["indexer"]["face"] >= recall["indexer-faces"]["face"] and precision["indexer"] >= 0.9
    assert m["indexer"]["by_source"]["keypoints"]["reported"] > 0 and m["indexer"]["keypoint_frames"] > 0
    assert m["indexer-faces"]["keypoint_frames"] == 0 and "keypoints" not in m["indexer-faces"]["by_source"]
    text = run("bench", "heads", HEAD_SET, "--root", DATA, "--method", "faces", "-q").stdout
    assert "back recall" in text and "0.000 (0/39)" in text


def two_shot_crowd(path: Path) -> Path:
    """The walking crowd cut in two shots: its first 2.08 s, 0.6 s of the hamilton clip (a cut), its rest."""
    crowd = read_frames(CROWD)
    h, w = crowd[0].shape[:2]
    cut = crowd[:52] + [cv2.resize(x, (w, h)) for x in frames_of(HAMILTON, 100, 115)] + crowd[52:]
    # crf 18, ultrafast: encoded in a fraction of the time, the same pictures to the eye
    return write_clip(path, cut, fps=25, options={"crf": "18", "preset": "ultrafast"})


def back_of_head_photo(path: Path) -> Path:
    """The grey-haired woman's head from behind, cut square from the original crowd clip (framed as heads are
    stored: the labelled head grown by 1/0.8)."""
    t, (x1, y1, x2, y2) = GREY_BACK
    rgb = frame_at(CROWD, t)
    side = max(x2 - x1, y2 - y1) / 0.8
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    crop = rgb[int(cy - side / 2):int(cy + side / 2), int(cx - side / 2):int(cx + side / 2)]
    cv2.imwrite(str(path), cv2.cvtColor(crop, cv2.COLOR_RGB2BGR))
    return path


@pytest.fixture(scope="module")
def crowd_library(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("faceless")
    video = two_shot_crowd(folder / "crowd-two-shots.mp4")
    library = folder / "library"
    run("index", video, "--library", library, "-q")
    return library, video


def test_people_seen_only_from_behind_are_indexed_and_listed(crowd_library):
    library, video = crowd_library
    tracks = json.loads(run("list", "--tracks", "--json", "--library", library).stdout)
    assert tracks and all(t["video"] == str(video) for t in tracks)
    for t in tracks:
        assert t["sightings"] == sum(t["found_by"].values()) and 0 <= t["faces"] <= t["sightings"]
        assert t["faces"] == t["found_by"]["face"]
    faceless = [t for t in tracks if t["faces"] == 0]
    assert len(faceless) >= 3 and all(t["started_by"] == "keypoints" for t in faceless)
    assert any(t["start"] >= 2.6 for t in faceless) and any(t["end"] <= 2.1 for t in faceless)  # in both shots
    assert sum(t["found_by"]["keypoints"] for t in tracks) > 0
    text = run("list", "--tracks", "--library", library)
    assert "started by keypoints" in text.stdout and "never showing a face" in text.stderr


def test_back_of_head_photo_finds_the_same_look_in_the_other_shot(crowd_library, tmp_path):
    library, video = crowd_library
    photo = back_of_head_photo(tmp_path / "back.png")
    # Confident hits only (no --show-weak): her tracks in both shots, through the look of her head alone.
    hits = query_json(library, photo, "--whole-image", "-k", "8")
    assert hits and all(h["id_score"] is None and h["matched_without_face"] for h in hits)  # no face on either side
    first, second = [h for h in hits if h["end"] <= 2.1], [h for h in hits if h["start"] >= 2.6]
    # Measured (26 tracks, appearance bar 0.782 at the library's FAR 1.9e-3): her own track in the first shot 0.956,
    # hers in the second 0.877, the next best 0.643, weak.
    assert len(first) == 1 and len(second) == 1 and {first[0]["tier"], second[0]["tier"]} == {"same_look"}
    assert first[0]["face_visible"] is False and second[0]["face_visible"] is False
    weak = query_json(library, photo, "--whole-image", "--show-weak", "-k", "8")
    others = [h["appearance_score"] for h in weak if h["track_id"] not in (first[0]["track_id"], second[0]["track_id"])]
    assert others and max(others) < second[0]["appearance_score"] - 0.1
    assert all(h["tier"] == "other_person" for h in weak if h["track_id"] not in (first[0]["track_id"], second[0]["track_id"]))
    tracks = {t["id"]: t for t in json.loads(run("list", "--tracks", "--json", "--library", library).stdout)}
    assert tracks[second[0]["track_id"]]["faces"] == 0 and tracks[second[0]["track_id"]]["started_by"] == "keypoints"


def test_back_of_head_photo_finds_nobody_among_other_people(hamilton_library, tmp_path):
    photo = back_of_head_photo(tmp_path / "back.png")
    confident = run("query", photo, "--whole-image", "--library", hamilton_library)
    assert "no confident match" in confident.stdout + confident.stderr
    weak = query_json(hamilton_library, photo, "--whole-image", "--show-weak", "-k", "20")
    # Measured: the hamilton and video-retalking people's 19 tracks score at most 0.477 on the look of the head alone,
    # against a bar of 0.773 at this library's size (all of ../shared/data but the crowd, 452 tracks: at most 0.504
    # against 0.838).
    assert weak and all(h["tier"] == "other_person" for h in weak) and max(h["appearance_score"] for h in weak) < 0.6


def test_heads_without_a_face_moved_into_a_person_are_its_moments_by_their_look(crowd_library, tmp_path):
    """Tracks that never show a face, moved into a person by hand, are scored as search scores them
    (`headsearch.evaluation.track_scores`): no identity, no head score (a face part left empty is no face to compare),
    the look of the head alone against the person's main look; "matched without a face" and a tier other than
    other_person only when that look clears the appearance bar, in a person of one track too."""
    library = tmp_path / "library"
    shutil.copytree(crowd_library[0], library)
    faceless = [t["id"] for t in json.loads(run("list", "--tracks", "--json", "--library", library).stdout) if t["faces"] == 0]
    people = json.loads(run("people", "--library", library, "--json", "--unlisted").stdout)
    largest, single = people[0], next(p for p in people if len(p["tracks"]) == 1)
    assert len(faceless) >= 3 and len(largest["tracks"]) >= 2
    run("people", "move", *faceless[:2], "--to", largest["id"], "--library", library)
    run("people", "move", faceless[2], "--to", single["id"], "--library", library)
    bar = thresholds_for(library, Library.open(library).model).appearance
    for person, moved in ((largest, faceless[:2]), (single, faceless[2:3])):
        hits = {h["track_id"]: h for h in json.loads(run("query", "--person", person["id"], "--library", library, "--json", "--no-pictures").stdout)}
        for tr in moved:
            h = hits[tr]
            assert h["id_score"] is None and h["head_score"] is None and h["score"] == h["appearance_score"] is not None
            assert h["tier"] == ("same_look" if h["appearance_score"] > bar else "other_person")
            assert h["matched_without_face"] == (h["tier"] == "same_look")
        assert all(hits[tr]["id_score"] is not None and not hits[tr]["matched_without_face"] for tr in person["tracks"])
    (own,) = single["tracks"]
    assert {hits[own][k] for k in ("id_score", "head_score")} == {1.0} and hits[own]["tier"] == "same_look"


def test_web_pages_show_how_faceless_sightings_were_found(crowd_library, tmp_path):
    library, _ = crowd_library
    tracks = json.loads(run("list", "--tracks", "--json", "--library", library).stdout)
    faceless = next(t for t in tracks if t["faces"] == 0)
    client = TestClient(create_app(library, cache_dir=tmp_path / "cache"))
    page = client.get(f"/api/tracks/{faceless['id']}?k=2").json()
    assert page["track"]["found_by"] == faceless["found_by"] and page["track"]["started_by"] == "keypoints"
    assert {s["found_by"] for s in page["sightings"]} <= {"keypoints", "followed"} and not any(s["face_visible"] for s in page["sightings"])
    html = client.get(f"/tracks/{faceless['id']}").text
    assert "no face · keypoints" in html and "started by keypoints" in html
    mixed = [t for t in tracks if t["faces"] and t["faces"] < t["sightings"]]
    run("people", "--library", library)
    people = json.loads(run("people", "--library", library, "--json", "--unlisted").stdout)  # persons of one track too
    shown = [tr for p in people for look in client.get(f"/api/people/{p['id']}").json()["looks"] for tr in look]
    assert shown and all({"faces", "faceless", "found_by"} <= tr.keys() for tr in shown)
    grouped = {tr for p in people for tr in p["tracks"]}
    if any(t["id"] in grouped for t in mixed):
        assert any(tr["faceless"] for tr in shown)
    held = {t["track_id"] for t in json.loads(run("people", "inbox", "--library", library, "--json").stdout) if t["reason"] != "alone"}
    assert all(t["id"] in grouped or t["id"] in held for t in mixed)  # a mixed track is in a person or held back by a gate

"""Queries a person can trust: confident-only hits, scope, the query photo never its own hit,
hits with kind/box/face/shot, numbered query heads, pictures of the matched moment, playable clips."""
from __future__ import annotations

import json
import shutil

import cv2
import numpy as np
import pytest
from clips import clip_info, frame_at, keyframe_times, read_frames
from conftest import AMY_DIR, EXAMPLES, HAMILTON, needs_data, query_json, run

from headsearch.detection.faces import FaceDetector
from headsearch.evaluation.thresholds import write_thresholds
from headsearch.store.library import Library

pytestmark = [needs_data, pytest.mark.slow]

LIN = EXAMPLES / "lin-manuel-miranda.png"
OBAMA_DIR = EXAMPLES / "knn_examples" / "train" / "obama"


def with_thresholds(src, dst, identity: float):
    """A copy of a library with its own thresholds.json (for the library's model), which wins over the model's."""
    shutil.copytree(src, dst)
    model = Library.open(dst).model
    write_thresholds(dst, {"far": 1e-3, "identity": identity, "same_look": identity + 0.02, "model": model.name,
                           "version": model.version})
    return dst


def test_confident_only_by_default(hamilton_library, tmp_path):
    # The default model ships thresholds: only hits above the identity threshold are shown, the rest counted.
    weak = query_json(hamilton_library, LIN, "-k", "5", "--show-weak")
    shown = query_json(hamilton_library, LIN, "-k", "5")
    assert len(weak) == 5 and 1 <= len(shown) < 5
    assert all(h["confident"] is True for h in shown) and weak[len(shown)]["confident"] is False
    assert [h["track_id"] for h in shown] == [h["track_id"] for h in weak[: len(shown)]]
    text = run("query", LIN, "--library", hamilton_library, "-k", "5")
    assert text.stdout.count(str(HAMILTON)) == len(shown) and "--show-weak lists them" in text.stdout
    assert "uncalibrated" not in text.stderr
    # A library's own thresholds win: a stricter bar keeps the best hit only.
    lib = with_thresholds(hamilton_library, tmp_path / "lib", identity=(weak[0]["score"] + weak[1]["score"]) / 2)
    hits = query_json(lib, LIN, "-k", "5")
    assert [h["track_id"] for h in hits] == [weak[0]["track_id"]] and hits[0]["confident"] is True
    # A stranger: a clear line, exit 0.
    stranger = run("query", AMY_DIR / "amy1.png", "--library", lib)
    assert stranger.exit_code == 0 and stranger.stdout.startswith("no confident match") and len(stranger.stdout.splitlines()) == 1
    assert query_json(lib, AMY_DIR / "amy1.png") == []
    # Asked for: the weak ones, marked; or an explicit bar.
    shown = query_json(lib, AMY_DIR / "amy1.png", "--show-weak", "-k", "3")
    assert len(shown) == 3 and all(h["confident"] is False for h in shown)
    assert "below the confidence bar" in run("query", AMY_DIR / "amy1.png", "--library", lib, "--show-weak", "-k", "1").stdout
    bar = weak[2]["score"]
    some = query_json(lib, LIN, "--min-score", f"{bar}", "-k", "10")
    assert len(some) >= 3 and all(h["score"] >= bar for h in some)
    # A model without thresholds: one line says the scores are uncalibrated, and every best hit is shown.
    uncal = tmp_path / "dlib"
    run("index", AMY_DIR, "--library", uncal, "--model", "dlib-resnet", "-q")
    uncalibrated = run("query", AMY_DIR / "amy1.png", "--library", uncal, "-k", "2")
    said = uncalibrated.stderr.strip().splitlines()
    assert len(said) == 2 and "uncalibrated" in said[0] and "`headsearch reindex" in said[1]  # and that the default would do
    assert len(query_json(uncal, AMY_DIR / "amy1.png", "-k", "2")) == 2


@pytest.fixture(scope="module")
def mixed_library(tmp_path_factory):
    """Hamilton, Lin's photo and Obama's photos."""
    root = tmp_path_factory.mktemp("mixed")
    media = root / "media"
    (media / "photos").mkdir(parents=True)
    shutil.copy(LIN, media / "photos" / "lin.png")
    for p in OBAMA_DIR.iterdir():
        shutil.copy(p, media / "photos" / p.name)
    shutil.copy(HAMILTON, media / "hamilton.mp4")
    lib = root / "lib"
    run("index", media, "--library", lib, "-q")
    return root


def test_query_file_is_never_a_hit_and_scope(mixed_library, tmp_path):
    lib, media = mixed_library / "lib", (mixed_library / "media").resolve()
    indexed_lin = str(media / "photos" / "lin.png")
    # The indexed copy itself, and the same photo at another path (same fingerprint): never a hit.
    for q in (media / "photos" / "lin.png", LIN):
        hits = query_json(lib, q, "-k", "10", "--show-weak")
        assert hits and indexed_lin not in {h["video"] for h in hits}
    videos = query_json(lib, OBAMA_DIR / "obama.jpg", "--videos-only", "-k", "10", "--show-weak")
    assert videos and {h["kind"] for h in videos} == {"video"}
    # Nothing in the clip above the bar: the best score and the way to see the rest (issue 43).
    best = max(h["id_score"] for h in videos)  # the bar holds the identity score
    said = run("query", OBAMA_DIR / "obama.jpg", "--library", lib, "--videos-only", "--min-score", f"{best + 0.01:.3f}")
    assert said.stdout.startswith(f"no confident match: the best score, {best:.3f}, is not above")
    assert "--show-weak" in said.stdout and said.exit_code == 0
    photos = query_json(lib, OBAMA_DIR / "obama.jpg", "--photos-only", "-k", "10", "--show-weak")
    assert photos and {h["kind"] for h in photos} == {"image"}
    assert str(media / "photos" / "obama.jpg") not in {h["video"] for h in photos}
    under = query_json(lib, LIN, "--under", media / "photos", "-k", "10", "--show-weak")
    assert under and all(h["video"].startswith(str(media / "photos")) for h in under)
    flat = query_json(lib, OBAMA_DIR / "obama.jpg", "-k", "6", "--show-weak")  # his other photos, and the clip
    grouped = query_json(lib, OBAMA_DIR / "obama.jpg", "--per-video", "-k", "6", "--show-weak")
    assert len({h["video"] for h in flat}) == len(grouped) >= 2 and sum(len(g["hits"]) for g in grouped) == 6
    assert all(g["hits"] and all(h["video"] == g["video"] for h in g["hits"]) for g in grouped)
    assert sorted(h["track_id"] for g in grouped for h in g["hits"]) == sorted(h["track_id"] for h in flat)
    text = run("query", LIN, "--library", lib, "--per-video", "-k", "1", "--show-weak").stdout.splitlines()  # Lin: the clip
    assert text[0].startswith(str(media / "hamilton.mp4")) and all(l.startswith("   ") for l in text[1:])
    assert run("query", LIN, "--library", lib, "--videos-only", "--photos-only", ok=False).exit_code == 1


def test_hit_fields_box_at_the_matched_time(hamilton_library):
    top = query_json(hamilton_library, LIN, "-k", "1")[0]
    assert top["kind"] == "video" and top["face_visible"] is True
    assert top["shot"]["index"] == 2 and top["shot"]["start"] <= top["start"] <= top["time"] <= top["end"] <= top["shot"]["end"] + 1e-6
    x1, y1, x2, y2 = top["box"]
    faces = FaceDetector().detect(frame_at(HAMILTON, top["time"]))
    face = max(faces, key=lambda f: f.box.area)
    cx, cy = face.box.center
    assert x1 < cx < x2 and y1 < cy < y2 and (x2 - x1) > face.box.width  # the head around Lin's face at that moment
    photo = query_json(hamilton_library, EXAMPLES / "two_people.jpg", "--all", "-k", "1")
    assert [h["head"] for h in photo] == [1, 2]
    assert photo[0]["box"][0] < photo[1]["box"][0]  # numbered left to right
    text = run("query", EXAMPLES / "two_people.jpg", "--library", hamilton_library, "--all", "-k", "1").stdout.splitlines()
    assert text[0].startswith("head 1 at x ") and any(l.startswith("head 2 at x ") for l in text)


def test_picture_is_the_matched_moment_with_the_head_boxed(hamilton_library):
    top = query_json(hamilton_library, LIN, "-k", "1")[0]
    picture = cv2.cvtColor(cv2.imread(top["picture"]), cv2.COLOR_BGR2RGB).astype(np.float32)
    h, w = picture.shape[:2]

    def difference(t: float) -> float:
        frame = cv2.resize(frame_at(HAMILTON, t), (w, h), interpolation=cv2.INTER_AREA).astype(np.float32)
        return float(np.abs(frame - picture).mean())

    at = difference(top["time"])
    assert at < 4.0  # the same frame (JPEG and the drawn box aside)
    assert difference(top["time"] - 1.0) > 2 * at and difference(top["time"] + 0.5) > 2 * at
    x1, y1, x2, y2 = (int(round(v * w / 640)) for v in top["box"])
    edge = picture[max(2, y2 - 1), max(x1, 0) + 5 : x2 - 5]
    assert np.median(edge[:, 1]) > 180 and np.median(edge[:, 0]) < 90  # the green box at the head's bottom edge


def test_thumbnail_of_a_head_at_the_frame_edge_is_not_smeared(tmp_path):
    lib = tmp_path / "lib"
    run("index", OBAMA_DIR / "obama.jpg", "--library", lib, "-q")
    hit = query_json(lib, EXAMPLES / "obama_small.jpg", "-k", "1")[0]
    x1, y1, x2, y2 = hit["box_unclipped"]  # the whole head's box ("box" is clipped to the photo)
    assert y1 < -50 and hit["box"][1] == 0.0  # the head box leaves the photo at the top
    thumb = cv2.imread(hit["thumbnail"]).astype(np.float32)
    outside = thumb[: int(thumb.shape[0] * (-y1) / (y2 - y1)) - 3]
    assert outside.std() < 3.0 and abs(outside.mean() - 48) < 4  # flat grey, not the top row of the photo repeated


def test_export_clips_play_from_a_keyframe(hamilton_library, tmp_path):
    clips = tmp_path / "clips"
    hits = json.loads(run("query", LIN, "--library", hamilton_library, "-k", "2", "--export-clips", clips, "--json").stdout)
    assert hits  # Lin in the clip: a confident hit, so at least one clip is checked
    for hit in hits:
        clip = hit["clip"]
        assert clip["method"] == "remux" and clip["start"] <= hit["start"] + 1e-3 and clip["end"] >= hit["end"] - 0.05
        frames = read_frames(clip["path"])
        assert clip_info(clip["path"]).audio  # the sound comes along
        assert len(frames) >= (hit["end"] - hit["start"]) * 29.97 - 2
        assert np.array_equal(frames[0], frame_at(HAMILTON, clip["start"]))  # starts exactly at that source frame
        assert min(abs(k - clip["start"]) for k in keyframe_times(HAMILTON)) < 1e-3
    text = run("query", LIN, "--library", hamilton_library, "-k", "1", "--export-clips", clips).stdout.splitlines()
    assert text[1].strip().startswith("clip ") and "play: mpv " in text[1]

"""Turned faces on real media: identity by yaw band on the profile set of tracks (bench/sets/profiles.csv), and the yaw
that hits and compare frames carry."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import DATA, EXAMPLES, HAMILTON, needs_data, query_json, run

pytestmark = [needs_data, pytest.mark.slow]

PROFILES = Path(__file__).resolve().parents[1] / "bench" / "sets" / "profiles.csv"
ALEX_TURNED = (1.519, 3.588)  # the hamilton clip's second shot: Alex Lacamoire in profile, then turned away


def test_the_profile_set_gives_identity_by_yaw_band(tmp_path):
    """The set's hamilton rows (Alex seen from the front at the piano and in profile; others frontal and turned):
    every row is a sample, and each band has pairs of a frontal side and a side turned that far."""
    with open(PROFILES, newline="") as f:
        reader = csv.DictReader(f)
        rows = [r for r in reader if r["file"].endswith("short_hamilton_clip.mp4")]
        columns = reader.fieldnames
    subset = tmp_path / "hamilton.csv"
    with open(subset, "w", newline="") as f:
        w = csv.DictWriter(f, columns)
        w.writeheader()
        w.writerows(rows)
    model = json.loads(run("bench", "accuracy", subset, "--root", DATA, "-m", "sface", "--json").stdout)["models"]["sface"]
    assert model["video_frames"] == len(rows) and model["failed_files"] == []
    bands = model["yaw_bands"]
    assert set(bands) == {"0-30", "30-60", "60+"}
    alex_front = sum(r["identity"] == "alex_lacamoire" and abs(float(r["yaw"])) < 30 for r in rows)
    alex_turned = sum(r["identity"] == "alex_lacamoire" and abs(float(r["yaw"])) >= 60 for r in rows)
    assert alex_front and alex_turned and bands["60+"]["n_genuine"] >= alex_front * alex_turned
    assert all(bands[b]["n_impostor"] > 0 and bands[b]["auc"] is not None for b in bands)
    text = run("bench", "accuracy", subset, "--root", DATA, "-m", "sface").stdout
    assert f"0 video tracks, {len(rows)} heads in video frames)" in text and "identity by yaw band" in text


def test_hits_and_compare_frames_say_how_far_the_face_is_turned(hamilton_library):
    hits = query_json(hamilton_library, EXAMPLES / "alex-lacamoire.png", "--videos-only", "--show-weak", "-k", "5")
    faced = [h for h in hits if h["face_visible"]]
    assert faced and all(isinstance(h["yaw"], float) and -90 <= h["yaw"] <= 90 for h in faced)
    assert all(h["yaw"] is None for h in hits if not h["face_visible"])
    turned = [h for h in faced if ALEX_TURNED[0] <= h["time"] < ALEX_TURNED[1]]
    assert turned and all(abs(h["yaw"]) >= 60 for h in turned)  # his shot in profile is shown at a sighting in profile

    out = json.loads(run("compare", HAMILTON, "--ref", EXAMPLES / "alex-lacamoire.png", "--json", "--fps", "2").stdout)[0]
    frames = [f for f in out["frames"] if f["tier"] != "no_head"]
    assert all((f["yaw"] is None) == (not f["face"]) for f in frames)
    alex = next(f["track"] for f in frames if f["time"] == ALEX_TURNED[0])  # his close-up opens the shot
    profile = [f for f in frames if f["track"] == alex and f["face"]]
    assert len(profile) >= 2 and all(abs(f["yaw"]) >= 60 for f in profile)

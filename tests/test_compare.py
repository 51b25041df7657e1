"""`headsearch compare`: the same person, in the same look, across a video's frames; on real clips of ../shared/data,
clips made from them (two people joined, a face hidden for two seconds) and bad input."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from clips import frames_of, write_clip
from conftest import EXAMPLES, HAMILTON, RETALKING, needs_data, run

pytestmark = [needs_data, pytest.mark.slow]

AOC = RETALKING / "3.mp4"  # one talking head (Alexandria Ocasio-Cortez), 5 s
OTHER = RETALKING / "1.mp4"  # another person's talking head


def _still(video: Path, t: float, out: Path) -> Path:
    """A frame of a clip as a photo: a generation team's source frame."""
    from headsearch.basics.frames import frame_at
    from headsearch.basics.images import encode_jpeg

    out.write_bytes(encode_jpeg(frame_at(video, t), 95))
    return out


def _blur_faces(video: Path, out: Path, start: float, end: float) -> Path:
    """The clip with every face blurred beyond detection from `start` to `end` s (25 fps): the head is still there, the
    face is not, as in a turn away."""
    import cv2

    from headsearch.detection.faces import FaceDetector

    detector = FaceDetector()

    def blurred():
        faces = []
        for n, rgb in enumerate(frames_of(video)):
            if start <= n / 25 < end:
                if n % 3 == 0 or not faces:  # a talking head hardly moves in 3 frames
                    faces = detector.detect(rgb) or faces
                for f in faces:
                    x1, y1 = max(0, int(f.box.x1) - 10), max(0, int(f.box.y1) - 10)
                    x2, y2 = int(f.box.x2) + 10, int(f.box.y2) + 10
                    rgb[y1:y2, x1:x2] = cv2.GaussianBlur(rgb[y1:y2, x1:x2], (0, 0), 25)
            yield rgb

    return write_clip(out, blurred(), fps=25, options={"preset": "ultrafast"}, even=True)


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> dict[str, Path]:
    """The reference still, the clip of two people joined, and the clip whose face is hidden from 1.5 to 3.5 s."""
    from bench.compare import join_clips

    folder = tmp_path_factory.mktemp("compare")
    joined = folder / "joined.mp4"
    join = join_clips(AOC, OTHER, joined, seconds=3.0)
    return {"still": _still(AOC, 0.5, folder / "aoc-still.jpg"), "joined": joined, "join": join,
            "hidden": _blur_faces(AOC, folder / "hidden-face.mp4", 1.5, 3.5), "folder": folder}


@pytest.fixture(scope="module")
def compared(media) -> dict:
    """One run over four videos (one unreadable), with a report and a gate."""
    bad = media["folder"] / "broken.mp4"
    bad.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"\x00" * 4000)
    report = media["folder"] / "report"
    result = run("compare", AOC, OTHER, media["joined"], bad, media["hidden"], "--ref", media["still"], "--json",
                 "--report", report, "--fail-under", "0.95", ok=None)
    return {"result": result, "entries": json.loads(result.stdout), "report": report}


def _entry(compared: dict, video: Path) -> dict:
    return next(e for e in compared["entries"] if Path(e["video"]).name == Path(video).name)


def test_own_person_and_another_person(compared):
    own, other = _entry(compared, AOC), _entry(compared, OTHER)
    for key in ("video", "reference", "verdict", "summary", "segments", "drifts", "shots", "thresholds", "frames"):
        assert key in own
    assert set(own["frames"][0]) >= {"time", "tier", "identity", "head", "face", "box"}
    assert set(own["segments"][0]) >= {"start", "end", "tier", "score"}
    assert own["verdict"] == "same_look" and own["summary"]["same_person_share"] >= 0.95 and not own["drifts"]
    assert own["summary"]["frames"] == len(own["frames"]) >= 9  # 2 frames a second of a 5 s clip
    heads = [f for f in other["frames"] if f["tier"] != "no_head"]
    assert other["verdict"] == "other_person" and sum(f["tier"] == "other_person" for f in heads) >= 0.95 * len(heads)
    assert own["summary"]["facesim"] > 0.7 > other["summary"]["facesim"]


def test_the_switch_of_two_joined_clips_is_found_at_the_join(compared, media):
    joined = _entry(compared, media["joined"])
    assert joined["verdict"] == "drift"
    assert len(joined["drifts"]) == 1
    drift = joined["drifts"][0]
    assert drift["from"] == "same_look" and drift["to"] == "other_person" and drift["at_cut"]
    assert abs(drift["time"] - media["join"]) <= 0.5
    first, second = joined["segments"][0], joined["segments"][-1]
    assert first["tier"] == "same_look" and second["tier"] == "other_person" and second["start"] == drift["time"]
    assert [round(s["start"], 3) for s in joined["shots"]][1] == second["start"]  # the segment starts on the cut's first frame


def test_a_clip_that_starts_as_someone_else_is_a_drift_too(media):
    """The two clips joined the other way round: the same verdict, one drift event at the join (a rise this time)."""
    from bench.compare import join_clips

    reversed_ = media["folder"] / "joined-reversed.mp4"
    join = join_clips(OTHER, AOC, reversed_, seconds=3.0)
    entry = json.loads(run("compare", reversed_, "--ref", media["still"], "--json", "--no-frames", "--fail-under", "0.95",
                           ok=None).stdout)[0]
    assert entry["verdict"] == "drift" and len(entry["drifts"]) == 1, entry["drifts"]
    drift = entry["drifts"][0]
    assert drift["from"] == "other_person" and drift["to"] in ("same_look", "other_look") and abs(drift["time"] - join) <= 0.5


def test_a_hidden_face_is_carried_by_its_track_and_what_facesim_skips(compared):
    hidden = _entry(compared, compared["report"].parent / "hidden-face.mp4")
    s = hidden["summary"]
    assert s["faceless_head_frames"] >= 3 and s["facesim_skipped_frames"] == s["faceless_head_frames"]
    faceless = [f for f in hidden["frames"] if not f["face"] and f["tier"] != "no_head"]
    assert faceless and all(f["carried"] and f["tier"] == "same_look" and f["identity"] is None for f in faceless)
    assert s["same_person_share"] == 1.0 and hidden["verdict"] == "same_look" and not hidden["drifts"]
    assert s["frames_with_any_face"] + s["facesim_skipped_frames"] == s["frames"]


def test_one_bad_video_is_one_line_and_the_gate_fails(compared):
    result = compared["result"]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "broken.mp4" in errors[0] and "Traceback" not in result.stderr
    assert any(e.get("error") and e["video"].endswith("broken.mp4") for e in compared["entries"])
    gates = [line for line in result.stderr.splitlines() if line.startswith("gate:")]
    assert {Path(line.split()[1]).name for line in gates} == {OTHER.name, "joined.mp4"}
    assert result.exit_code == 1  # the gate: a video under --fail-under


def test_gates_take_percentages_and_the_look(media):
    """--fail-under 95 is 95%, as 0.95 is; --fail-under-look gates the same-look share; a video that cannot be read is
    exit 4, not click's usage error 2."""
    for bar in ("95", "95%", "0.95"):
        r = run("compare", media["joined"], "--ref", media["still"], "--fail-under", bar, ok=None)
        assert r.exit_code == 1 and "under --fail-under 95%" in r.stderr, (bar, r.stderr)
    r = run("compare", AOC, "--ref", media["still"], "--fail-under-look", "100", ok=None)
    assert r.exit_code in (0, 1) and ("under --fail-under-look 100%" in r.stderr) == (r.exit_code == 1)
    assert run("compare", AOC, "--ref", media["still"], "--fail-under-look", "0.5").exit_code == 0
    r = run("compare", AOC, "--ref", media["still"], "--fail-under", "101", ok=None)
    assert r.exit_code == 2 and "Traceback" not in r.output
    bad = media["folder"] / "unreadable.mp4"
    bad.write_bytes(b"\x00" * 4000)
    assert run("compare", AOC, bad, "--ref", media["still"], ok=None).exit_code == 4


def test_report_pages_and_leaderboard(compared):
    import csv

    report = compared["report"]
    rows = list(csv.DictReader((report / "leaderboard.csv").open()))
    assert [Path(r["video"]).name for r in rows][:2] in ([AOC.name, "hidden-face.mp4"], ["hidden-face.mp4", AOC.name])
    assert Path(rows[-1]["video"]).name == OTHER.name and rows[-1]["verdict"] == "other_person"
    page = (report / rows[2]["report"]).read_text()
    assert "<svg" in page and 'class="drift"' in page and "data:image/jpeg;base64," in page
    assert "broken.mp4" in (report / "index.html").read_text()  # the videos not compared are named


def test_several_people_each_track_to_the_best(tmp_path):
    """The hamilton clip: Miranda's frontal shot (3.588-7.892 s) is Miranda's, the audience shot (7.892 s on) the
    Obamas'; each track goes to one reference at most; `--ref DIR` and repeated --ref make one template."""
    out = run("compare", HAMILTON, "--name", "Miranda", "--ref", EXAMPLES / "lin-manuel-miranda.png", "--name", "Obama",
              "--ref", EXAMPLES / "knn_examples" / "train" / "obama", "--ref", EXAMPLES / "knn_examples" / "test" / "obama1.jpg",
              "--json", "--no-frames")
    entries = {e["reference"]["name"]: e for e in json.loads(out.stdout)}
    assert set(entries) == {"Miranda", "Obama"} and entries["Obama"]["reference"]["heads"] == 3
    for name, (start, end) in {"Miranda": (3.588, 7.892), "Obama": (7.892, 10.1)}.items():
        inside = [s for s in entries[name]["segments"] if s["start"] >= start - 1e-3 and s["end"] <= end + 1e-3]
        assert inside and all(s["tier"] in ("same_look", "other_look") for s in inside), (name, entries[name]["segments"])
        outside = [s for s in entries[name]["segments"] if s["end"] <= 3.588 + 1e-3 and s["start"] >= 1.519 - 1e-3]
        assert all(s["tier"] == "other_person" for s in outside), (name, outside)  # Alex's close-up is nobody's here
    assert "frames" not in entries["Miranda"]


def test_the_text_says_where_the_drifts_are(miranda_compared):
    text, _ = miranda_compared
    assert "drift at 0:00:07.892: same_look -> other_person (at a cut)" in text


def test_bad_references_are_one_line(tmp_path):
    import cv2

    blank = tmp_path / "blank.png"
    cv2.imwrite(str(blank), np.full((200, 200, 3), 128, np.uint8))
    r = run("compare", AOC, "--ref", blank, ok=False)
    assert r.exit_code == 3 and r.stderr.count("\n") == 1 and "no head" in r.stderr
    r = run("compare", AOC, "--ref", EXAMPLES / "two_people.jpg", ok=False)
    assert r.exit_code == 3 and "--ref-head" in r.stderr and "Traceback" not in r.stderr
    r = run("compare", AOC, "--ref", EXAMPLES / "two_people.jpg", "--ref-head", "9", ok=False)
    assert r.exit_code == 3 and "no head 9" in r.stderr
    r = run("compare", AOC, ok=False)
    assert r.exit_code == 2 and "give a reference" in r.stderr
    r = run("compare", AOC, "--name", "a", "--ref", EXAMPLES / "obama_small.jpg", "--name", "b", ok=False)
    assert r.exit_code == 2 and "--name b names no reference" in r.stderr
    assert "Exit status" in run("compare", "--help").stdout


def test_no_head_at_all_is_a_verdict(tmp_path):
    video = tmp_path / "grey.mp4"
    rng = np.random.default_rng(0)
    write_clip(video, (rng.integers(100, 140, (120, 160, 3), dtype=np.uint8) for _ in range(20)), fps=10,
               options={"preset": "ultrafast"})
    out = json.loads(run("compare", video, "--ref", EXAMPLES / "obama_small.jpg", "--json").stdout)
    assert out[0]["verdict"] == "no_head" and out[0]["summary"]["shares"]["no_head"] == 1.0 and out[0]["summary"]["facesim"] is None


def test_ref_video_and_a_person_of_the_library(hamilton_library, media, tmp_path):
    """A reference clip's main person and a named person of a library, together one template, answer as the clip's own
    still does; a person the library does not know is one line."""
    import shutil

    library = shutil.copytree(hamilton_library, tmp_path / "library")
    people = json.loads(run("people", "--library", library, "--json", "--unlisted").stdout)
    aoc = next(p for p in people if any(Path(v).name == AOC.name for v in p["videos"]))
    run("people", "--library", library, "name", aoc["id"], "Alexandria")
    out = run("compare", media["joined"], "--ref-video", AOC, "--person", "Alexandria", "--library", library, "--json", "--no-frames")
    joined = json.loads(out.stdout)[0]
    assert joined["verdict"] == "drift" and abs(joined["drifts"][0]["time"] - media["join"]) <= 0.5
    sources = joined["reference"]["sources"]
    assert joined["reference"]["name"] == "3" and "its main person" in sources[0] and "Alexandria" in sources[1]
    r = run("compare", AOC, "--person", "Nobody", "--library", library, ok=False)
    assert r.exit_code == 3 and "no person named 'Nobody'" in r.stderr


def test_segments_merge_inside_a_shot_and_drifts_need_evidence():
    """Short runs join their neighbour inside the shot; a run that is a shot of its own stays; a fall in tier that the
    frame noise explains is not a drift."""
    from headsearch.compare.timeline import CompareSettings, Frame, drifts_of, merge_segments, segments_of
    from headsearch.evaluation.thresholds import Thresholds
    from schemas.records import Shot

    t = Thresholds(1e-3, 0.4, 0.6, "m", "v", frame_noise={"identity": 0.05, "head": 0.05, "independent_per_s": 1.0})

    def frames(specs):  # (time, shot, tier, identity)
        out = [Frame(tm, tm + 0.5, int(tm * 2), shot, tier, identity=i, head=i, face=True) for tm, shot, tier, i in specs]
        out[-1].end = out[-1].time + 0.5
        return out

    shots = [Shot(0, 0, 7, 0.0, 4.0), Shot(1, 8, 9, 4.0, 5.0)]
    fs = frames([(0.0, 0, "same_look", 0.8), (0.5, 0, "same_look", 0.8), (1.0, 0, "other_person", 0.2), (1.5, 0, "same_look", 0.8),
                 (2.0, 0, "same_look", 0.8), (2.5, 0, "same_look", 0.8), (3.0, 0, "same_look", 0.8), (3.5, 0, "same_look", 0.8),
                 (4.0, 1, "other_person", 0.1), (4.5, 1, "other_person", 0.1)])
    merged = merge_segments(segments_of(fs, shots), 1.0)
    assert [(s.start, s.end, s.tier) for s in merged] == [(0.0, 4.0, "same_look"), (4.0, 5.0, "other_person")]
    assert [d.time for d in drifts_of(merged, t, CompareSettings())] == [4.0]
    wander = frames([(x / 2, 0, "same_look" if x < 4 else "other_look", 0.62 if x < 4 else 0.58) for x in range(8)])
    assert drifts_of(merge_segments(segments_of(wander, shots[:1]), 1.0), t, CompareSettings()) == []

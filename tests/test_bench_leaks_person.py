"""`bench redact` on a presence set under `redact --person` beside `--ref`: the library's person that holds a labelled
person's frames (by their labelled centres, or any sighting where an interval has none), and the second table and its
JSON, or a line saying it was not measured where the library has no people."""
from __future__ import annotations

from pathlib import Path

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

"""`headsearch bench presence`: the set's reading and the interval arithmetic (fast tier), and the command on the hamilton
clip and two of its people, its numbers checked against intervals stated here and against what `query` and
`redact --ref` themselves return (slow tier)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import DATA, needs_data, run

from bench.presence import (
    Interval,
    frames_in_ranges,
    measure,
    on_screen_frames,
    read_presence_set,
    runs,
    views_of,
)
from headsearch.basics.errors import HeadsearchError

ROOT = Path(__file__).resolve().parents[1]
HEADER = "person,file,first_frame,last_frame,view,reference,ref_time,ref_box\n"


def _set(tmp_path: Path, rows: str) -> Path:
    path = tmp_path / "presence.csv"
    path.write_text(HEADER + rows)
    return path


def test_a_set_gives_each_person_their_frames_by_view_and_one_reference(tmp_path):
    people = read_presence_set(_set(tmp_path, "a,v.mp4,0,4,front,a.jpg,,\na,v.mp4,5,6,back,,,\n"
                                              "b,v.mp4,2,3,profile,v.mp4,0.5,10 20 110 220\n"))
    assert [p.name for p in people] == ["a", "b"]
    assert people[0].on_screen() == {"v.mp4": {0: "front", 1: "front", 2: "front", 3: "front", 4: "front", 5: "back", 6: "back"}}
    assert people[0].reference.time is None and people[1].reference.box == (10, 20, 110, 220)
    assert people[1].reference.describe() == "v.mp4 at 0.500 s box 10 20 110 220"


@pytest.mark.parametrize("rows, says", [
    ("a,v.mp4,0,4,side,a.jpg,,\n", "a view"),
    ("a,v.mp4,5,4,front,a.jpg,,\n", "first_frame <= last_frame"),
    ("a,v.mp4,x,4,front,a.jpg,,\n", "whole frame numbers"),
    ("a,v.mp4,0,4,front,,,\n", "gives no reference"),
    ("a,v.mp4,0,4,front,a.jpg,,\na,v.mp4,5,6,front,b.jpg,,\n", "a second reference"),
    ("a,v.mp4,0,4,front,a.jpg,,\na,v.mp4,4,6,back,,,\n", "frame 4 is in two intervals"),
    ("a,v.mp4,0,4,front,v.mp4,,1 2 3 4\n", "ref_box is x1 y1 x2 y2"),
    ("a,v.mp4,0,4,front,v.mp4,1.0,1 2 3\n", "ref_box is x1 y1 x2 y2"),
])
def test_a_wrong_row_is_refused_in_one_line(tmp_path, rows, says):
    with pytest.raises(HeadsearchError, match=says):
        read_presence_set(_set(tmp_path, rows))


def test_a_file_without_the_columns_is_refused(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("file,time\nv.mp4,1\n")
    with pytest.raises(HeadsearchError, match="missing: person"):
        read_presence_set(path)


def test_a_time_range_holds_the_frames_from_its_start_up_to_its_end():
    times = [0.852 + i * 1001 / 30000 for i in range(30)]  # the hamilton clip's grid
    # A track shown as 0.852-1.519 s ends where the next shot begins (frame 20, at 1.519 s): frames 0-19.
    assert frames_in_ranges([round(t, 3) for t in times], [(0.852, 1.519)]) == set(range(20))
    assert frames_in_ranges(times, [(0.9, 0.96), (1.0, 1.0)]) == {2, 3}  # an empty range holds nothing
    assert runs({5, 1, 2, 3, 9}) == [(1, 3), (5, 5), (9, 9)]


def test_coverage_false_frames_and_pieces_per_shot():
    on = on_screen_frames([Interval("v", 0, 9, "front"), Interval("v", 10, 19, "back"), Interval("v", 30, 39, "profile")])
    shots = {"v": [(0, 24), (25, 49)]}
    claims = {"v": {1: set(range(0, 10)), 2: set(range(12, 20)), 3: set(range(40, 45))},  # 3: after the person left
              "w": {4: {0, 1}}}  # another video, where the person is not
    c = measure(on, claims, shots)
    assert c.on == {"front": 10, "profile": 10, "back": 10}
    assert c.covered == {"front": 10, "profile": 0, "back": 8}
    assert c.share() == pytest.approx(18 / 30) and c.share(("back",)) == pytest.approx(0.8)
    assert (c.claimed, c.false) == (10 + 8 + 5 + 2, 7)
    assert c.pieces == [2, 0]  # shot 1: two tracks; shot 2: the person is on screen and nothing claims them
    assert c.turned_in_found == (8, 10)  # the back frames of the found shot; the profile's shot was not found
    d = c.to_dict()
    assert d["pieces_per_found_shot"] == 2.0 and d["shots_found"] == 1 and d["shots_on_screen"] == 2
    assert d["coverage"]["all"] == 0.6 and d["false_share"] == 0.28
    assert views_of(on)["v"] == [(0, 9, "front"), (10, 19, "back"), (30, 39, "profile")]


def test_nothing_claimed_is_no_coverage_and_no_pieces():
    c = measure(on_screen_frames([Interval("v", 3, 5, "profile")]), {}, {"v": [(0, 9)]})
    assert c.share() == 0.0 and c.claimed == 0 and c.pieces == [0] and c.to_dict()["false_share"] is None


# ----- the command on real media -----------------------------------------------------------------------
HAMILTON = "face_recognition/examples/short_hamilton_clip.mp4"
STATED = {  # by eye on contact sheets (bench/sets/README.md): shots 0-19, 20-81, 82-210, 211-274
    "lin_manuel_miranda": [(0, 19, "front"), (82, 210, "front")],
    "alex_lacamoire": [(0, 19, "front"), (20, 73, "profile"), (74, 81, "back")],
}
PHOTOS = {"lin_manuel_miranda": "face_recognition/examples/lin-manuel-miranda.png",
          "alex_lacamoire": "face_recognition/examples/alex-lacamoire.png"}


def _frame_time(i: int) -> float:
    return 0.852 + i * 1001 / 30000  # the clip's first frame is at 0.852 s, 29.97 frames a second


@needs_data
@pytest.mark.slow
def test_bench_presence_counts_what_query_and_redact_claim_against_stated_intervals(tmp_path, hamilton_library):
    library = tmp_path / "library"
    shutil.copytree(hamilton_library, library)  # the command indexes the set's videos into it (unchanged: skipped)
    rows = "".join(f"{who},{HAMILTON},{a},{b},{view},{PHOTOS[who] if n == 0 else ''},,\n"
                   for who, spans in STATED.items() for n, (a, b, view) in enumerate(spans))
    plot = tmp_path / "strips.png"
    said = run("bench", "presence", _set(tmp_path, rows), "--root", DATA, "-l", library, "--json", "-q", "--plot", plot)
    got = {p["person"]: p for p in json.loads(said.stdout)["per_person"]}
    assert plot.stat().st_size > 0
    for who, spans in STATED.items():
        on = {f: view for a, b, view in spans for f in range(a, b + 1)}
        report = got[who]
        assert report["query"]["on_screen"] == {v: sum(x == v for x in on.values()) for v in ("front", "profile", "back")}
        # What `query` itself returns, counted here against the stated frames.
        hits = json.loads(run("query", DATA / PHOTOS[who], "-l", library, "-k", "100", "--json").stdout)
        claimed = {f for h in hits if h.get("confident", True)
                   for f in range(275) if h["start"] - 1e-3 <= _frame_time(f) < h["end"] - 1e-3}
        assert report["query"]["covered"] == {v: sum(f in claimed for f, x in on.items() if x == v) for v in ("front", "profile", "back")}
        assert report["query"]["false"] == len(claimed - on.keys()) and report["query"]["claimed"] == len(claimed)
        # What `redact --ref` itself hides: its chosen tracks' frames.
        out = tmp_path / f"{who}.mp4"
        written = json.loads(run("redact", DATA / HAMILTON, "--ref", DATA / PHOTOS[who], "-l", library, "--out", out, "--json").stdout)
        audit = json.loads(Path(written["audit"]).read_text())  # its audit trail: each hidden track's first and last frame
        hidden = {f for t in audit["tracks"] for f in range(t["first_frame"], t["last_frame"] + 1)}
        assert report["tracks"]["covered"] == {v: sum(f in hidden for f, x in on.items() if x == v) for v in ("front", "profile", "back")}
        assert report["tracks"]["false"] == len(hidden - on.keys())
    # Miranda is found whole in both his shots, by one track each: nothing turned to miss.
    lin = got["lin_manuel_miranda"]["query"]
    assert lin["coverage"]["front"] == 1.0 and lin["false"] == 0 and lin["pieces"] == [1, 1]
    # Lacamoire's shot-one track is found; his profile close-up and his back are where coverage is lost today.
    alex = got["alex_lacamoire"]["query"]
    assert alex["coverage"]["front"] == 1.0 and alex["coverage"]["back"] is not None and alex["pieces"][0] == 1


def test_a_missing_file_of_the_set_is_one_line(tmp_path):
    path = _set(tmp_path, "a,nowhere/gone.mp4,0,4,front,a.jpg,,\n")
    said = run("bench", "presence", path, ok=False)
    assert "gone.mp4: not found" in said.output and "Traceback" not in said.output

"""`headsearch bench redact`: the judge of hidden heads looks at pixels alone (fast tier, generated pictures), and the
benchmark runs headsearch and deface on real labelled heads (slow tier)."""
from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from clips import timed_frames, write_clip
from conftest import DATA, needs_data, run

from bench.redact import ToolResult, detail, hidden, judge_frame
from headsearch.evaluation.head_boxes import HeadFrame, LabelledHead
from schemas.records import Box

ROOT = Path(__file__).resolve().parents[1]


def textured(h: int = 240, w: int = 320, seed: int = 0) -> np.ndarray:
    """A picture with detail everywhere (smoothed noise, as skin and hair have)."""
    rng = np.random.default_rng(seed)
    grey = cv2.GaussianBlur(rng.uniform(0, 255, (h, w)).astype(np.float32), (0, 0), 1.2)
    return np.repeat(np.clip(grey, 0, 255).astype(np.uint8)[:, :, None], 3, axis=2)


def test_the_judge_tells_hidden_from_kept_whatever_the_style():
    src = textured()
    box = (slice(60, 180), slice(100, 220))
    noisy = np.clip(src.astype(np.int16) + np.random.default_rng(1).integers(-3, 4, src.shape), 0, 255).astype(np.uint8)  # codec noise
    blurred, pixelated, boxed = src.copy(), src.copy(), src.copy()
    blurred[box] = cv2.GaussianBlur(src[box], (0, 0), 8)
    pixelated[box] = cv2.resize(cv2.resize(src[box], (8, 8), interpolation=cv2.INTER_AREA), (120, 120), interpolation=cv2.INTER_NEAREST)
    boxed[box] = 0
    ds = detail(src)
    assert hidden(ds[box], detail(noisy)[box]) is False
    for out in (blurred, pixelated, boxed):
        assert hidden(ds[box], detail(out)[box]) is True
    assert hidden(np.zeros((20, 20), np.float32), np.zeros((20, 20), np.float32)) is None  # no detail: nothing to tell


def test_a_frame_counts_its_heads_by_view_and_the_picture_outside():
    src = textured(seed=2)
    out = src.copy()
    out[60:180, 100:220] = cv2.GaussianBlur(src[60:180, 100:220], (0, 0), 8)  # the face hidden, the back of a head not
    frame = HeadFrame("clip.mp4", None, 1.0, [LabelledHead(Box(100, 60, 220, 180), "face"), LabelledHead(Box(10, 10, 60, 60), "back"),
                                              LabelledHead(Box(250, 150, 300, 200), "profile", ignore=True)])
    r = ToolResult("tool")
    judge_frame(src, out, frame, r)
    assert r.heads["face"] == [1, 1] and r.heads["back"] == [0, 1] and r.heads["profile"] == [0, 0]
    assert r.outside[1] > 50 and r.outside[0] == 0  # nothing hidden outside the heads
    everything = cv2.GaussianBlur(src, (0, 0), 8)
    r2 = ToolResult("tool")
    judge_frame(src, everything, frame, r2)
    assert r2.outside_share > 0.9 and r2.heads["back"] == [1, 1]


def _first_seconds(src: Path, out: Path, until: float) -> float:
    """The clip's frames up to `until` (its own timeline) as a new clip starting at 0; the first frame's time in the source."""
    from headsearch.basics.timeline import probe_timing

    times: list[float] = []

    def shown_until_then():
        for time, rgb in timed_frames(src):
            if time > until:
                return
            times.append(time)
            yield rgb

    write_clip(out, shown_until_then(), fps=probe_timing(src).rate, options={"preset": "ultrafast", "crf": "12"})
    return times[0]


def test_an_output_on_its_own_timeline_is_judged_on_the_source_frames_pictures(tmp_path, monkeypatch):
    """A tool that writes its own timeline (deface starts the hamilton clip's at 0, not at its first frame's 0.852 s,
    showing the first frame until then) is judged on its frames that show the labelled pictures, matched by the
    pixels, not on its frames of the same number: a copy that hides nothing hides no head and nothing else (matched by
    number, another frame of a moving picture passed for hidden heads)."""
    from fractions import Fraction

    import bench.redact as br

    frames = [np.roll(textured(seed=3), 12 * i, axis=1) for i in range(20)]
    source = tmp_path / "clip.mp4"
    write_clip(source, frames, fps=10, pts=list(range(5, 25)), time_base=Fraction(1, 10), options={"crf": "10"})

    def copy(video: Path, out: Path) -> None:  # hides nothing; its timeline starts at 0, the first frame shown until 0.5 s
        write_clip(out, [frames[0]] * 5 + frames, fps=10, options={"crf": "10"})

    monkeypatch.setattr(br, "run_deface", copy)
    labels = tmp_path / "heads.csv"
    labels.write_text("file,time,x1,y1,x2,y2,view,ignore\nclip.mp4,1.3,60,60,140,140,face,\nclip.mp4,2.0,150,80,230,160,profile,\n")
    result = br.bench_redact(br.RedactOptions(labels, tmp_path, tools=("deface",), work_dir=tmp_path / "out"), report=lambda _: None).results[0]
    assert result.error is None and result.heads["face"] == [0, 1] and result.heads["profile"] == [0, 1]
    assert result.outside[1] > 100 and result.outside_share == 0.0


@needs_data
@pytest.mark.slow
def test_bench_redact_runs_both_tools_on_the_same_frames(tmp_path):
    """The hamilton clip's first 1.6 s (the wide stage: faces, a back, a profile): headsearch hides the heads and
    little else; deface runs on the same frames where the bench extra installed it, else one line says how."""
    start = _first_seconds(DATA / "face_recognition" / "examples" / "short_hamilton_clip.mp4", tmp_path / "stage.mp4", 1.7)
    rows = []
    for line in (ROOT / "bench" / "sets" / "heads.csv").read_text().splitlines():
        file, time, *rest = line.split(",")
        if "hamilton" in file and float(time) < 1.6:  # on the new clip's timeline, which starts at 0
            rows.append(",".join(["stage.mp4", f"{float(time) - start:.3f}", *rest]))
    subset = tmp_path / "stage-heads.csv"
    subset.write_text("file,time,x1,y1,x2,y2,view,ignore\n" + "\n".join(rows) + "\n")
    said = run("bench", "redact", subset, "--json", "-q", ok=None)
    tools = {t["tool"]: t for t in json.loads(said.stdout)["tools"]}
    ours = tools["headsearch"]
    assert ours["error"] is None and ours["heads"]["face"]["labelled"] == 2 and ours["heads"]["back"]["labelled"] == 1
    assert ours["heads"]["face"]["share"] == 1.0 and ours["outside_share"] < 0.1 and ours["x_real_time"] > 0
    theirs = tools["deface"]
    if theirs["error"] is None:  # installed with the bench extra (scripts/test.sh installs it)
        assert theirs["heads"]["face"]["labelled"] == 2 and theirs["outside_share"] is not None and said.exit_code == 0
    else:
        assert "pip install" in theirs["error"] and said.exit_code == 1

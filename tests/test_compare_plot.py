"""The compare plot draws each sampled frame's scores at the frame's own time (issue 43: a frame at 4.000 s was drawn at
4.26 s, the middle of its sampling interval). Generated frames: no media."""
from __future__ import annotations

import re

import numpy as np

from headsearch.compare.reference import Reference
from headsearch.compare.report import PlotSize, plot_svg
from headsearch.compare.timeline import Comparison, Frame
from headsearch.evaluation.thresholds import Thresholds
from schemas.records import VectorKind


def test_scores_are_drawn_at_their_frames_times():
    times = [0.0, 0.52, 1.04, 4.0, 4.52]
    frames = [Frame(t, times[i + 1] if i + 1 < len(times) else 5.0, i, 0, "same_look", identity=0.6, head=0.5, face=True)
              for i, t in enumerate(times)]
    c = Comparison("clip.mp4", Reference("ref", {VectorKind.ID: np.ones(4, np.float32) / 2}), frames, [], [], [(0.0, 5.0)], 5.0, 0.0,
                   Thresholds(1e-3, 0.4, 0.6, "m", "v"))
    size = PlotSize()
    svg = plot_svg(c, size=size)
    drawn = {float(t): float(cx) for cx, t in re.findall(r'<circle cx="([\d.]+)"[^>]*><title>0:00:0(\d\.\d+) identity', svg)}
    width = size.width - size.right - size.left
    assert drawn and all(abs(cx - (size.left + width * t / 5.0)) < 0.06 for t, cx in drawn.items()), drawn

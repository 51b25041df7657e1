"""Labelled head boxes (bench/sets/heads.csv, described in bench/sets/README.md) and how found heads are scored
against them: recall by view (face, profile, back) and precision at an IoU bar, with ignore regions.

A set is a CSV `file,time,x1,y1,x2,y2,view,ignore`: every head of a frame (the file's own pixels, the whole
head incl. hair, stopping at the frame's edge), its view, and `ignore` = 1 for heads or regions that count for
nothing. Matching is greedy by score: each found head, best first, takes the unmatched counted head it overlaps
most at IoU >= the bar. A found head that takes none is a false positive, unless half of it lies inside an
ignore region or it overlaps one at IoU >= the bar. Found boxes are clipped to the frame first (labels stop at
the frame's edge).
"""
from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from headsearch.basics.errors import HeadsearchError
from schemas.records import Box

VIEWS = ("face", "profile", "back")
COLUMNS = ("file", "time", "x1", "y1", "x2", "y2", "view")


@dataclass(frozen=True)
class LabelledHead:
    box: Box
    view: str  # one of VIEWS
    ignore: bool = False


@dataclass
class HeadFrame:
    """One labelled frame: a file, a presentation time, every head in it."""

    file: str  # as the set names it
    path: Path  # resolved against the set's root
    time: float  # seconds on the file's presentation timeline
    heads: list[LabelledHead] = field(default_factory=list)


@dataclass(frozen=True)
class FoundHead:
    """A head box some method found in a labelled frame (the file's own pixels)."""

    box: Box
    score: float  # matching order (higher first)
    source: str  # how it was found (e.g. "face", "keypoints", "followed")


def read_head_set(csv_path: Path, root: Path | None = None) -> list[HeadFrame]:
    """The frames of a head set, in the order of their first row; `root` is the folder the files' relative
    paths start from (default: the CSV's folder). Raises HeadsearchError for an unreadable or malformed set."""
    csv_path = Path(csv_path)
    root = Path(root) if root is not None else csv_path.parent
    try:
        with open(csv_path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise HeadsearchError(f"{csv_path}: cannot read the head set ({e.strerror or e})") from e
    if rows and not set(COLUMNS) <= set(rows[0]):
        raise HeadsearchError(f"{csv_path}: a head set needs the columns {','.join(COLUMNS)}[,ignore]")
    frames: dict[tuple[str, float], HeadFrame] = {}
    for n, row in enumerate(rows, 2):
        try:
            key = (row["file"], round(float(row["time"]), 3))
            box = Box(*(float(row[k]) for k in ("x1", "y1", "x2", "y2")))
        except (TypeError, ValueError):
            raise HeadsearchError(f"{csv_path}:{n}: time and box must be numbers") from None
        view = row["view"].strip()
        if view not in VIEWS:
            raise HeadsearchError(f"{csv_path}:{n}: view {view!r} is not one of {', '.join(VIEWS)}")
        if key not in frames:
            path = Path(row["file"])
            frames[key] = HeadFrame(row["file"], path if path.is_absolute() else root / path, key[1])
        frames[key].heads.append(LabelledHead(box, view, (row.get("ignore") or "").strip() not in ("", "0")))
    if not frames:
        raise HeadsearchError(f"{csv_path}: no labelled heads")
    return list(frames.values())


def clipped(box: Box, width: float, height: float) -> Box | None:
    """The part of a box inside the frame (None when nothing is)."""
    b = Box(max(0.0, box.x1), max(0.0, box.y1), min(float(width), box.x2), min(float(height), box.y2))
    return b if b.x2 > b.x1 and b.y2 > b.y1 else None


def _inside_share(box: Box, region: Box) -> float:
    ix = max(0.0, min(box.x2, region.x2) - max(box.x1, region.x1))
    iy = max(0.0, min(box.y2, region.y2) - max(box.y1, region.y1))
    return ix * iy / max(box.area, 1e-9)


def match_frame(found: Sequence[FoundHead], heads: Sequence[LabelledHead], iou: float = 0.5) -> tuple[list[int | None], list[str]]:
    """(for each labelled head, the index of the found head matched to it or None; for each found head "tp",
    "fp" or "ignored"). Greedy by score, see the module docstring."""
    hit: list[int | None] = [None] * len(heads)
    status = ["fp"] * len(found)
    for i in sorted(range(len(found)), key=lambda i: -found[i].score):
        best, best_j = iou, None
        for j, h in enumerate(heads):
            if hit[j] is None and not h.ignore:
                o = found[i].box.iou(h.box)
                if o >= best:
                    best, best_j = o, j
        if best_j is not None:
            hit[best_j] = i
            status[i] = "tp"
        elif any(h.ignore and (_inside_share(found[i].box, h.box) >= 0.5 or found[i].box.iou(h.box) >= iou) for h in heads):
            status[i] = "ignored"
    return hit, status


@dataclass
class HeadScores:
    """Counts over a set: counted heads found per view, found heads right per source, IoUs of the matches."""

    found: dict[str, int] = field(default_factory=lambda: {v: 0 for v in VIEWS})  # view -> heads found
    heads: dict[str, int] = field(default_factory=lambda: {v: 0 for v in VIEWS})  # view -> counted heads
    right: dict[str, int] = field(default_factory=dict)  # source -> found heads matching a head
    reported: dict[str, int] = field(default_factory=dict)  # source -> found heads counted (not ignored)
    ious: list[float] = field(default_factory=list)

    def add(self, found: Sequence[FoundHead], heads: Sequence[LabelledHead], iou: float = 0.5) -> None:
        hit, status = match_frame(found, heads, iou)
        for h, i in zip(heads, hit, strict=True):
            if h.ignore:
                continue
            self.heads[h.view] += 1
            if i is not None:
                self.found[h.view] += 1
                self.ious.append(found[i].box.iou(h.box))
        for f, s in zip(found, status, strict=True):
            if s == "ignored":
                continue
            self.reported[f.source] = self.reported.get(f.source, 0) + 1
            self.right[f.source] = self.right.get(f.source, 0) + (s == "tp")

    def recall(self, view: str) -> float | None:
        return self.found[view] / self.heads[view] if self.heads[view] else None

    @property
    def precision(self) -> float | None:
        n = sum(self.reported.values())
        return sum(self.right.values()) / n if n else None

    def to_dict(self) -> dict:
        n, tp = sum(self.reported.values()), sum(self.right.values())
        return {"recall": {v: {"recall": self.recall(v), "found": self.found[v], "heads": self.heads[v]} for v in VIEWS},
                "precision": {"precision": self.precision, "right": tp, "reported": n},
                "by_source": {s: {"precision": self.right[s] / self.reported[s] if self.reported[s] else None,
                                  "right": self.right[s], "reported": self.reported[s]} for s in sorted(self.reported)},
                "mean_iou": float(np.mean(self.ious)) if self.ious else None}


def score_frames(results: Iterable[tuple[HeadFrame, Sequence[FoundHead]]], iou: float = 0.5) -> HeadScores:
    """Scores of found heads over labelled frames."""
    scores = HeadScores()
    for frame, found in results:
        scores.add(found, frame.heads, iou)
    return scores

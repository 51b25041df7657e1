"""Redaction against a labelled head set (`headsearch bench redact SET`): the share of labelled heads hidden in the
output, by view (face, profile, back), and the share of the picture hidden outside them; for `headsearch redact
--everyone` and for `deface` (a face-only redactor, MIT, CenterFace; the peer) on the same videos in the same run.

The judge looks at pixels alone, the same for any tool: a region is hidden where the output no longer holds the
source's detail there. Detail is what a 5-pixel Gaussian blur takes away (the grey image less its blur); a region's
detail is kept when the output's detail correlates with the source's (codec noise keeps it above 0.8 on these clips)
and hidden when the correlation falls under HIDDEN_BELOW (a blur, pixels, a filled box: 0.0-0.3), or when the region is
replaced by something flat. A labelled head counts as hidden when the middle of its box (HEAD_CORE of each side) is;
the picture outside the labelled heads (ignored ones included, grown by OUTSIDE_MARGIN) is cut into CELL-pixel cells,
and the share hidden is that of its cells with detail in the source.

A labelled time is the source's frame presented nearest it. An output's frame is matched to it by the pixels: of the
output's frame of the same number (a tool that keeps every frame, as headsearch does), the three presented nearest the
time (a tool that writes its own constant-rate timeline: deface starts the hamilton clip's at 0, not at its first
frame's 0.852 s, with 25 frames more), and the one of that number on the source's frame-rate grid (a variable-rate file
written at a constant rate, its dropped frames repeated: deface on goldeneye), the one most like the source's frame
outside the labelled heads.
"""
from __future__ import annotations

import bisect
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from headsearch.basics.errors import HeadsearchError
from headsearch.basics.timeline import probe_timing
from headsearch.evaluation.head_boxes import VIEWS, HeadFrame, read_head_set
from schemas.records import Box

if TYPE_CHECKING:
    from actions.redact import Redactor

Report = Callable[[str], None]
HIDDEN_BELOW = 0.5  # a region whose detail correlates less than this with the source's is hidden
HEAD_CORE = 0.6  # the middle of a labelled head box (this share of each side) must be hidden
CELL = 16  # pixels: the picture outside the heads is judged in cells this size
OUTSIDE_MARGIN = 0.25  # labelled boxes grow by this share of their size before the outside is judged
THUMB_W = 96  # pixels: frames are matched on grey copies this wide...
MATCH_SLACK = 1.0  # ...the first candidate within this many grey levels of the most alike (codec noise) is taken
MIN_DETAIL = 4.0  # a region whose source detail (standard deviation, grey levels) is under this says nothing: not judged
TOOLS = ("headsearch", "deface")
DEFACE_HINT = "pip install -e '.[bench]' (deface, MIT: the face-only redactor measured beside headsearch)"


@dataclass(frozen=True)
class RedactOptions:
    set_csv: Path
    root: Path | None = None
    tools: tuple[str, ...] = TOOLS
    style: str = "blur"
    work_dir: Path | None = None  # where the redacted videos are written (None: a temporary folder, removed after)


@dataclass
class ToolResult:
    """One tool over the set: labelled heads hidden by view, the picture hidden outside them, its speed."""

    tool: str
    heads: dict[str, list[int]] = field(default_factory=lambda: {v: [0, 0] for v in VIEWS})  # view -> [hidden, labelled]
    outside: list[int] = field(default_factory=lambda: [0, 0])  # [hidden cells, cells with detail]
    seconds: float = 0.0
    video_seconds: float = 0.0
    error: str | None = None

    def share(self, view: str) -> float | None:
        hidden, n = self.heads[view]
        return hidden / n if n else None

    @property
    def outside_share(self) -> float | None:
        return self.outside[0] / self.outside[1] if self.outside[1] else None

    def to_dict(self) -> dict:
        return {"tool": self.tool, "error": self.error,
                "heads": {v: {"hidden": h, "labelled": n, "share": None if not n else round(h / n, 4)} for v, (h, n) in self.heads.items()},
                "outside_share": None if self.outside_share is None else round(self.outside_share, 4),
                "seconds": round(self.seconds, 2), "video_seconds": round(self.video_seconds, 2),
                "x_real_time": round(self.video_seconds / self.seconds, 3) if self.seconds else None}


@dataclass
class RedactRun:
    options: RedactOptions
    results: list[ToolResult]
    videos: list[str]

    def to_dict(self) -> dict:
        return {"set": str(self.options.set_csv), "style": self.options.style, "videos": self.videos,
                "judge": {"hidden_below": HIDDEN_BELOW, "head_core": HEAD_CORE, "cell": CELL}, "tools": [r.to_dict() for r in self.results]}

    def text(self) -> str:
        def pct(x: float | None) -> str:
            return "n/a" if x is None else f"{100 * x:.1f}%"

        lines = [f"redaction of {len(self.videos)} labelled video{'s' if len(self.videos) != 1 else ''} ({self.options.set_csv}), "
                 "judged from the pixels alone",
                 f"{'tool':<12}" + "".join(f"{v + ' hidden':>16}" for v in VIEWS) + f"{'outside hidden':>16}{'x real time':>13}"]
        for r in self.results:
            if r.error:
                lines.append(f"{r.tool:<12}not measured: {r.error}")
                continue
            cells = "".join(f"{pct(r.share(v)) + f' of {r.heads[v][1]}':>16}" for v in VIEWS)
            speed = f"{r.video_seconds / r.seconds:.2f}x" if r.seconds else "n/a"
            lines.append(f"{r.tool:<12}{cells}{pct(r.outside_share):>16}{speed:>13}")
        return "\n".join(lines)


# ----- the judge --------------------------------------------------------------------------------------------
def _grey(rgb: np.ndarray) -> np.ndarray:
    return rgb.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)


def detail(rgb: np.ndarray) -> np.ndarray:
    """What a blur takes away: the grey image less its 5-pixel Gaussian blur."""
    import cv2

    grey = _grey(rgb)
    return grey - cv2.GaussianBlur(grey, (0, 0), 2.5)


def hidden(source: np.ndarray, output: np.ndarray) -> bool | None:
    """Whether a region's detail is gone in the output (None: the source has too little detail there to tell)."""
    a, b = source.ravel(), output.ravel()
    if a.size < 16 or float(a.std()) < MIN_DETAIL / 4:
        return None
    if float(b.std()) < 1e-3:
        return True  # flat: filled
    return float(np.corrcoef(a, b)[0, 1]) < HIDDEN_BELOW


def _region(img: np.ndarray, box: Box, core: float = 1.0) -> np.ndarray:
    h, w = img.shape[:2]
    cx, cy = (box.x1 + box.x2) / 2, (box.y1 + box.y2) / 2
    hw, hh = (box.x2 - box.x1) * core / 2, (box.y2 - box.y1) * core / 2
    x1, x2 = int(max(0, cx - hw)), int(min(w, cx + hw))
    y1, y2 = int(max(0, cy - hh)), int(min(h, cy + hh))
    return img[y1:y2, x1:x2]


def _at_size_of(output: np.ndarray, source: np.ndarray) -> np.ndarray:
    """An output's frame at the source's size (deface writes 1080p as 1088 rows)."""
    if output.shape == source.shape:
        return output
    import cv2

    return cv2.resize(output, (source.shape[1], source.shape[0]), interpolation=cv2.INTER_AREA)


def _around_heads(h: int, w: int, frames: Sequence[HeadFrame]) -> np.ndarray:
    """Where the labelled heads of these frames lie (ignored ones included), each box grown by OUTSIDE_MARGIN of its
    size: a h x w mask."""
    inside = np.zeros((h, w), bool)
    for f in frames:
        for head in f.heads:
            b = head.box
            mx, my = (b.x2 - b.x1) * OUTSIDE_MARGIN, (b.y2 - b.y1) * OUTSIDE_MARGIN
            inside[int(max(0, b.y1 - my)):int(min(h, b.y2 + my)), int(max(0, b.x1 - mx)):int(min(w, b.x2 + mx))] = True
    return inside


def judge_frame(source: np.ndarray, output: np.ndarray, frame: HeadFrame, result: ToolResult) -> None:
    """Add one labelled frame's heads and outside cells to a tool's counts."""
    ds, do = detail(source), detail(_at_size_of(output, source))
    for head in frame.heads:
        if head.ignore:
            continue
        verdict = hidden(_region(ds, head.box, HEAD_CORE), _region(do, head.box, HEAD_CORE))
        result.heads[head.view][1] += 1
        result.heads[head.view][0] += bool(verdict)  # a head with no detail to tell counts as not hidden
    h, w = source.shape[:2]
    inside = _around_heads(h, w, [frame])
    grey = _grey(source)
    for y in range(0, h - CELL + 1, CELL):
        for x in range(0, w - CELL + 1, CELL):
            if inside[y:y + CELL, x:x + CELL].any() or float(grey[y:y + CELL, x:x + CELL].std()) < MIN_DETAIL:
                continue
            verdict = hidden(ds[y:y + CELL, x:x + CELL], do[y:y + CELL, x:x + CELL])
            if verdict is not None:
                result.outside[1] += 1
                result.outside[0] += verdict


def frame_times(path: Path) -> list[float]:
    """The presentation times (seconds) of a video's frames, in the order they are shown, from its packets."""
    import av

    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        return sorted(float(p.pts * stream.time_base) for p in c.demux(stream) if p.pts is not None and p.size)


def nearest(times: Sequence[float], seconds: float) -> int:
    """The number of the frame presented nearest `seconds` (`times`: sorted)."""
    i = bisect.bisect_left(times, seconds)
    return min((j for j in (i - 1, i) if 0 <= j < len(times)), key=lambda j: abs(times[j] - seconds), default=0)


def _thumb(rgb: np.ndarray, frames: Sequence[HeadFrame]) -> np.ndarray:
    """A frame as a small grey picture, the labelled heads (grown by OUTSIDE_MARGIN) left out (NaN)."""
    import cv2

    h, w = rgb.shape[:2]
    grey = _grey(rgb)
    keep = (~_around_heads(h, w, frames)).astype(np.float32)
    size = (THUMB_W, max(1, round(THUMB_W * h / w)))
    area = cv2.resize(keep, size, interpolation=cv2.INTER_AREA)
    small = cv2.resize(grey * keep, size, interpolation=cv2.INTER_AREA) / np.maximum(area, 1e-6)
    return np.where(area > 0.99, small, np.nan)


def matched_output(out: Path, source: dict[int, np.ndarray], wanted: dict[int, tuple[float, list[HeadFrame]]],
                   grid: Callable[[float], int]) -> dict[int, np.ndarray]:
    """The output's frame matched to each source frame (`wanted`: source frame number -> its labelled time and frames;
    `grid`: a time's frame number on the source's rate grid): see the module's docstring."""
    times = frame_times(out)
    near = {n: nearest(times, t) for n, (t, _) in wanted.items()}
    candidates = {n: list(dict.fromkeys(c for c in (n, near[n], grid(t), near[n] - 1, near[n] + 1) if 0 <= c < len(times)))
                  for n, (t, _) in wanted.items()}  # in order of preference where they are as like the source
    decoded = frames_by_number(out, sorted({c for cs in candidates.values() for c in cs}))
    found = {}
    for n, cs in candidates.items():
        have = [c for c in cs if c in decoded]
        if n not in source or not have:
            continue
        if len(have) == 1:
            found[n] = decoded[have[0]]
            continue
        frames = wanted[n][1]
        ref = _thumb(source[n], frames)
        unlike = {c: _unlike(decoded[c], source[n], ref, frames) for c in have}
        best = min(unlike.values())
        found[n] = decoded[next(c for c in have if unlike[c] <= best + MATCH_SLACK)]
    return found


def _unlike(rgb: np.ndarray, source: np.ndarray, ref: np.ndarray, frames: Sequence[HeadFrame]) -> float:
    """How far an output's frame is from the source's (`ref`: its `_thumb`) outside the labelled heads, in grey levels."""
    d = np.abs(_thumb(_at_size_of(rgb, source), frames) - ref)
    return float(np.nanmean(d)) if np.isfinite(d).any() else 0.0


def frames_by_number(path: Path, numbers: Sequence[int]) -> dict[int, np.ndarray]:
    """The decoded frames of these numbers (from 0, in decoding order), RGB."""
    import av

    wanted, out = set(numbers), {}
    with av.open(str(path)) as c:
        for n, frame in enumerate(c.decode(video=0)):
            if n in wanted:
                out[n] = frame.to_ndarray(format="rgb24")
            if len(out) == len(wanted):
                break
    return out


# ----- the tools ----------------------------------------------------------------------------------------------
def deface_command() -> list[str] | None:
    """How to run deface (its console script beside this Python, or on the PATH); None when it is not installed."""
    here = Path(sys.executable).with_name("deface")
    found = str(here) if here.is_file() else shutil.which("deface")
    return [found] if found else None


def run_deface(video: Path, out: Path) -> None:
    command = deface_command()
    if command is None:
        raise HeadsearchError(f"deface is not installed: {DEFACE_HINT}")
    done = subprocess.run([*command, str(video), "-o", str(out), "--keep-audio"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if done.returncode != 0 or not out.is_file():
        said = (done.stderr or done.stdout).strip().splitlines()
        raise HeadsearchError(f"deface failed on {video.name}: {said[-1] if said else f'exit {done.returncode}'}")


def _redacted(result: ToolResult, video: Path, out: Path, redactor: Redactor | None, style: str) -> bool:
    """Run the result's tool on one video (headsearch's `redact --everyone` through `redactor`, deface as its own
    command), its time added; False (the error kept) when it failed."""
    from actions.redact import Whom

    t0 = time.perf_counter()
    try:
        if result.tool == "headsearch":
            redactor.redact(video, Whom(everyone=True), out, style)
        else:
            run_deface(video, out)
    except HeadsearchError as e:
        result.error = str(e)
        return False
    result.seconds += time.perf_counter() - t0
    return True


def bench_redact(options: RedactOptions, report: Report = print) -> RedactRun:
    """Redact every labelled video with each tool and judge the outputs (see the module's docstring)."""
    import tempfile

    from actions.redact import Redactor

    frames = read_head_set(options.set_csv, options.root)
    by_video: dict[Path, list[HeadFrame]] = {}
    for f in frames:
        by_video.setdefault(f.path, []).append(f)
    missing = [str(p) for p in by_video if not p.is_file()]
    if missing:
        raise HeadsearchError(f"{missing[0]}: no such video (give --root, the folder the set's paths start from)")
    results = [ToolResult(t) for t in options.tools]
    redactor = Redactor.open() if "headsearch" in options.tools else None
    with tempfile.TemporaryDirectory(prefix="headsearch-bench-redact-") as tmp:
        work = Path(options.work_dir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        for video, labelled in by_video.items():
            timing = probe_timing(video)
            if timing is None:
                raise HeadsearchError(f"{video}: cannot read its frames' timing")
            shown = frame_times(video)
            numbers = {id(f): nearest(shown, f.time) for f in labelled}
            wanted: dict[int, tuple[float, list[HeadFrame]]] = {}
            for f in labelled:
                wanted.setdefault(numbers[id(f)], (f.time, []))[1].append(f)
            source = frames_by_number(video, sorted(wanted))
            for r in results:
                if r.error:
                    continue
                out = work / f"{r.tool}-{video.stem}.mp4"
                report(f"{r.tool}: {video.name}")
                if not _redacted(r, video, out, redactor, options.style):
                    continue
                r.video_seconds += timing.frames / float(timing.grid or timing.rate)
                output = matched_output(out, source, wanted, timing.frame_at)
                for f in labelled:
                    n = numbers[id(f)]
                    if n in source and n in output:
                        judge_frame(source[n], output[n], f, r)
    return RedactRun(options, results, [str(v) for v in by_video])

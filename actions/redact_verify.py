"""`redact --verify`: a redacted video looked at again, every frame, for faces still showing.

The look is the most sensitive the redactor has: the detector of a redaction that hides every head
(`indexer.every_head.EveryFaceDetector`: the index's look, and the frame enlarged for small and faint faces), on every
frame of the OUTPUT as a player shows it (upright, at the size the analysis decodes), not on the frames the analysis
sampled. What it finds is a face a viewer may see: each with its frame, time, box and score, and a contact sheet of them
(each face cut out larger, its box drawn) to look at before publishing. `verify_output` returns a `Verification` whose
`to_dict()` is what the CLI's --json and the web job show.

Given the source, a face found where the output's detail no longer follows the source's (its middle's fine detail
correlates below HIDDEN_BELOW with the source's, as `bench redact` judges a head hidden) is a detection on the hidden
patch itself, not a face a viewer sees: on the crowd clip after --everyone, the detector's usual look scored the blur
over a boy's head 0.87 (frame 45). Such faces are kept apart in the record (`on_hidden`), each with its correlation, and
do not fail the check; a face whose detail is the source's (a frame left unredacted) correlates near 1. The detail is
compared on the middle of the face's box and around its five landmarks (eyes, nose, mouth corners): a box that takes in
a blurred head and the body below it (the hamilton clip's close-up after --everyone: 0.94, frame 123) has its features
on the blur.

A detection that the analysis would not take as evidence of a face by itself (`indexer.evidence.confident`: a score
under its bar or landmarks that do not lie as on a face) is `doubtful`: listed, not failing the check. The most
sensitive look, on every frame, scores hands on a microphone and folds of a jacket too (the hamilton clip after
--everyone: 19 detections, 6 with implausible landmarks, all hands, cuffs and the jacket's edge when looked at); those
that pass the evidence rule still fail the check, to be looked at on the contact sheet: a redaction gate fails closed.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from actions.redact_frames import FrameProgress, first_frame_turns
from headsearch.basics.errors import MediaError, first_line
from headsearch.basics.files import write_bytes_atomic
from headsearch.basics.settings import IndexSettings
from headsearch.basics.text import counted
from headsearch.basics.timeline import format_time
from headsearch.detection.faces import FaceDetector
from indexer.evidence import confident

VERIFY_SUFFIX = ".verify.png"  # the contact sheet of faces still found: OUT + this, beside the output
SHEET_FACES = 24  # faces on the contact sheet at most (the highest scores; every one is in the record)
TILE_H = 160  # pixels: each face cut out this tall on the sheet...
TILE_CONTEXT = 1.5  # ...with this share of its box around it on each side
SAID_FRAMES = 12  # frames named in the one-line summary at most
HIDDEN_BELOW = 0.5  # a face region whose fine detail correlates less than this with the source's is hidden (bench redact's bar)
FACE_CORE = 0.6  # ...judged on the middle of the face box (this share of each side)
MIN_DETAIL = 4.0  # grey levels: a source region with less fine detail says nothing, and the face counts


# How a result names the files it wrote: the CLI by their paths; the web app by their names, or not at all where its
# pages cannot open them (they are in the job's folder in the app's cache).
Shown = Callable[[Path], "str | None"]


def shown_path(shown: Shown, path: Path | None) -> str | None:
    return shown(path) if path is not None else None


@dataclass(frozen=True)
class FaceLeft:
    """A face the look found in the output: frame number (from 0), its time on the file's timeline, its box in the
    upright picture's pixels (x1, y1, x2, y2) and the detector's score."""

    frame: int
    time: float
    box: tuple[int, int, int, int]
    score: float
    follows_source: float | None = None  # how its fine detail correlates with the source's there (None: not compared)

    def to_dict(self) -> dict:
        return {"frame": self.frame, "time": round(self.time, 3), "box": list(self.box), "score": round(self.score, 3),
                **({"follows_source": round(self.follows_source, 3)} if self.follows_source is not None else {})}


@dataclass
class Verification:
    """What looking at a redacted video again found."""

    output: Path
    frames: int = 0  # frames looked at (every decoded frame)
    faces: list[FaceLeft] = field(default_factory=list)
    on_hidden: list[FaceLeft] = field(default_factory=list)  # found on a hidden patch (its detail not the source's)
    doubtful: list[FaceLeft] = field(default_factory=list)  # not evidence of a face by the analysis' rule: listed only
    sheet: Path | None = None  # the contact sheet of the faces found (None: none found)
    seconds: float = 0.0
    look: str = "every frame, the redactor's most sensitive look (the frame enlarged for small faces too)"

    @property
    def clean(self) -> bool:
        return not self.faces

    @property
    def frames_with_faces(self) -> list[int]:
        return sorted({f.frame for f in self.faces})

    def line(self, shown: Shown = str) -> str:
        """In one line; `shown` says the contact sheet (`Shown`)."""
        if self.clean:
            aside = (f" ({counted(len(self.on_hidden), 'detection')} on hidden patches, their detail not the source's, set aside: "
                     f"frame{'s' if len(self.on_hidden) != 1 else ''} {', '.join(str(f.frame) for f in self.on_hidden[:SAID_FRAMES])})"
                     if self.on_hidden else "")
            doubt = (f"; {counted(len(self.doubtful), 'doubtful detection')} (under the evidence bar or not shaped as a face) listed"
                     if self.doubtful else "")
            return f"verified: no face found in {counted(self.frames, 'frame')} of the output{aside}{doubt}"
        frames = self.frames_with_faces
        named = ", ".join(str(f) for f in frames[:SAID_FRAMES]) + (", ..." if len(frames) > SAID_FRAMES else "")
        return (f"verify FAILED: {counted(len(self.faces), 'face')} still found in {len(frames):,} of {counted(self.frames, 'frame')} "
                f"of the output (frame{'s' if len(frames) != 1 else ''} {named})" + (f"; see {sheet}" if (sheet := shown_path(shown, self.sheet)) else ""))

    def to_dict(self, shown: Shown = str) -> dict:
        """What the look found, as `redact --verify --json` prints it and the web job shows it; `shown` says its paths."""
        return {"output": shown_path(shown, self.output), "clean": self.clean, "frames": self.frames, "frames_with_faces": self.frames_with_faces,
                "faces": [f.to_dict() for f in self.faces], "on_hidden": [f.to_dict() for f in self.on_hidden],
                "doubtful": [f.to_dict() for f in self.doubtful], "sheet": shown_path(shown, self.sheet),
                "seconds": round(self.seconds, 3), "look": self.look, "line": self.line(shown)}


def verify_output(out: Path, detector: FaceDetector, sheet: Path | None = None, progress: FrameProgress | None = None,
                  decode_max_side: int = IndexSettings.decode_max_side, source: Path | None = None) -> Verification:
    """Every frame of the video `out`, upright and no larger than `decode_max_side` (as the analysis decodes it), seen by
    `detector`; a contact sheet of the faces found is written to `sheet` (default OUT.verify.png) when there are any.
    `source`: the video it was redacted from (frame for frame), to tell a face from a detection on a hidden patch."""
    import av

    with contextlib.ExitStack() as stack:
        originals = _frames_of(stack.enter_context(av.open(str(source)))) if source is not None else None
        return _verify(out, detector, sheet, progress, decode_max_side, originals)


def _frames_of(container):
    for frame in container.decode(container.streams.video[0]):
        yield frame.to_ndarray(format="rgb24")


def _verify(out: Path, detector: FaceDetector, sheet: Path | None, progress: FrameProgress | None, decode_max_side: int,
            originals) -> Verification:
    import av

    out = Path(out)
    t0 = time.perf_counter()
    found = Verification(out)
    turns, _ = first_frame_turns(out)
    tiles: list[tuple[FaceLeft, np.ndarray]] = []
    if progress is not None:
        progress.reset(total=None)
    try:
        with av.open(str(out)) as c:
            stream = c.streams.video[0]
            stream.thread_type = "AUTO"
            for index, frame in enumerate(c.decode(stream)):
                rgb = frame.to_ndarray(format="rgb24")
                rgb = np.ascontiguousarray(np.rot90(rgb, turns)) if turns else rgb
                scale = min(1.0, decode_max_side / max(rgb.shape[:2]))
                small = cv2.resize(rgb, (round(rgb.shape[1] * scale), round(rgb.shape[0] * scale)), interpolation=cv2.INTER_AREA) if scale < 1 else rgb
                seconds = float(frame.time) if frame.time is not None else 0.0
                original = next(originals, None) if originals is not None else None
                if original is not None and turns:
                    original = np.ascontiguousarray(np.rot90(original, turns))
                for face in detector.detect(small):
                    b = face.box
                    box = tuple(int(round(v / scale)) for v in (b.x1, b.y1, b.x2, b.y2))
                    features = np.asarray(face.landmarks, np.float64) / scale
                    follows = _follows(original, rgb, box, features) if original is not None and original.shape == rgb.shape else None
                    left = FaceLeft(index, seconds, box, float(face.score), follows)
                    if follows is not None and follows < HIDDEN_BELOW:
                        found.on_hidden.append(left)
                        continue
                    if not confident(face):
                        found.doubtful.append(left)
                        continue
                    found.faces.append(left)
                    tiles.append((left, _cut(rgb, box)))
                found.frames = index + 1
                if progress is not None:
                    progress.update(1)
    except (av.error.FFmpegError, ValueError, IndexError) as e:
        raise MediaError(f"{out}: cannot be read back to verify it ({first_line(e)})") from e
    if found.faces:
        found.sheet = _write_sheet(Path(sheet) if sheet is not None else out.with_name(out.name + VERIFY_SUFFIX), out, tiles, found)
    found.seconds = time.perf_counter() - t0
    return found


def _follows(source: np.ndarray, output: np.ndarray, box: tuple[int, int, int, int], features: np.ndarray) -> float | None:
    """How the fine detail of the face in `output` correlates with the source's, the lower of the middle of `box` and
    the regions around its landmarks `features` (None: the source has too little detail in either to say)."""
    middle = _follows_in(source, output, box)
    x1, y1, x2, y2 = box
    side = max(4.0, 0.25 * min(x2 - x1, y2 - y1))
    around = [_follows_in(source, output, (int(x - side), int(y - side), int(x + side), int(y + side)), 1.0) for x, y in features]
    known = [c for c in (middle, *around) if c is not None]
    return min(known) if known else None


def _follows_in(source: np.ndarray, output: np.ndarray, box: tuple[int, int, int, int], core: float = FACE_CORE) -> float | None:
    """How the fine detail of the middle of `box` (`core` of each side) in `output` correlates with the source's (None:
    the source has too little detail there to say)."""
    x1, y1, x2, y2 = box
    dx, dy = (x2 - x1) * (1 - core) / 2, (y2 - y1) * (1 - core) / 2
    cx1, cy1 = max(0, int(x1 + dx)), max(0, int(y1 + dy))
    cx2, cy2 = min(output.shape[1], int(x2 - dx)), min(output.shape[0], int(y2 - dy))
    if cx2 - cx1 < 4 or cy2 - cy1 < 4:
        return None
    a, b = (_detail(im[cy1:cy2, cx1:cx2]) for im in (source, output))
    if a.std() < MIN_DETAIL:
        return None
    return float(np.corrcoef(a.ravel(), b.ravel())[0, 1]) if b.std() > 0 else 0.0


def _detail(region: np.ndarray) -> np.ndarray:
    grey = cv2.cvtColor(np.ascontiguousarray(region), cv2.COLOR_RGB2GRAY).astype(np.float32)
    return grey - cv2.GaussianBlur(grey, (0, 0), max(1.0, min(grey.shape) / 24))


def _cut(rgb: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
    """The face with some of its surroundings, its box drawn, TILE_H pixels tall (BGR, for OpenCV)."""
    x1, y1, x2, y2 = box
    w, h = max(1, x2 - x1), max(1, y2 - y1)
    cx1, cy1 = max(0, int(x1 - TILE_CONTEXT * w)), max(0, int(y1 - TILE_CONTEXT * h))
    cx2, cy2 = min(rgb.shape[1], int(x2 + TILE_CONTEXT * w)), min(rgb.shape[0], int(y2 + TILE_CONTEXT * h))
    region = cv2.cvtColor(np.ascontiguousarray(rgb[cy1:cy2, cx1:cx2]), cv2.COLOR_RGB2BGR)
    scale = TILE_H / max(1, region.shape[0])
    tile = cv2.resize(region, (max(1, round(region.shape[1] * scale)), TILE_H), interpolation=cv2.INTER_CUBIC)
    p1 = (round((x1 - cx1) * scale), round((y1 - cy1) * scale))
    p2 = (round((x2 - cx1) * scale), round((y2 - cy1) * scale))
    cv2.rectangle(tile, p1, p2, (0, 0, 255), 2, cv2.LINE_AA)
    return tile


def _write_sheet(path: Path, out: Path, tiles: list[tuple[FaceLeft, np.ndarray]], found: Verification) -> Path:
    """The faces found (the highest scores first, up to SHEET_FACES), each captioned with its frame, time and score."""
    shown = sorted(tiles, key=lambda t: -t[0].score)[:SHEET_FACES]
    shown.sort(key=lambda t: (t[0].frame, t[0].box))
    width = min(480, max(240, *(t.shape[1] for _, t in shown)))
    caption, head, columns = 20, 30, max(1, min(len(shown), 1200 // (width + 6)))
    rows = -(-len(shown) // columns)
    sheet = np.full((head + rows * (TILE_H + caption + 6) + 6, columns * (width + 6) + 6, 3), 245, np.uint8)
    title = f"{out.name}: {counted(len(found.faces), 'face')} found in {len(found.frames_with_faces)} of {found.frames} frames"
    cv2.putText(sheet, title[:110], (8, 20), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (30, 30, 30), 1, cv2.LINE_AA)
    for i, (face, tile) in enumerate(shown):
        y, x = head + (i // columns) * (TILE_H + caption + 6), 6 + (i % columns) * (width + 6)
        sheet[y:y + tile.shape[0], x:x + min(tile.shape[1], width)] = tile[:, :width]
        text = f"frame {face.frame}  {format_time(face.time)}  score {face.score:.2f}"
        cv2.putText(sheet, text, (x + 2, y + TILE_H + 15), cv2.FONT_HERSHEY_SIMPLEX, 0.42, (40, 40, 40), 1, cv2.LINE_AA)
    ok, png = cv2.imencode(".png", sheet)
    if not ok:
        raise MediaError(f"{path}: cannot encode the contact sheet")
    write_bytes_atomic(path, png.tobytes())
    return path

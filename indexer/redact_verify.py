"""`redact --verify`: a redacted video looked at again, every frame, for faces still showing.

The look is the most sensitive the redactor has: the detector of a redaction that hides every head
(`indexer.redact.EveryFaceDetector`: the index's look, and the frame enlarged for small and faint faces), on every
frame of the OUTPUT as a player shows it (upright, at the size the analysis decodes), not on the frames the analysis
sampled. What it finds is a face a viewer may see: each with its frame, time, box and score, and a contact sheet of them
(each face cut out larger, its box drawn) to look at before publishing. `verify_output` returns a `Verification` whose
`to_dict()` is what the CLI's --json and the web job show.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from headsearch.basics.errors import MediaError, first_line
from headsearch.basics.files import write_bytes_atomic
from headsearch.basics.settings import IndexSettings
from headsearch.basics.text import counted
from headsearch.basics.timeline import format_time
from headsearch.detection.faces import FaceDetector
from indexer.redact_frames import FrameProgress, first_frame_turns

VERIFY_SUFFIX = ".verify.png"  # the contact sheet of faces still found: OUT + this, beside the output
SHEET_FACES = 24  # faces on the contact sheet at most (the highest scores; every one is in the record)
TILE_H = 160  # pixels: each face cut out this tall on the sheet...
TILE_CONTEXT = 1.5  # ...with this share of its box around it on each side
SAID_FRAMES = 12  # frames named in the one-line summary at most


@dataclass(frozen=True)
class FaceLeft:
    """A face the look found in the output: frame number (from 0), its time on the file's timeline, its box in the
    upright picture's pixels (x1, y1, x2, y2) and the detector's score."""

    frame: int
    time: float
    box: tuple[int, int, int, int]
    score: float

    def to_dict(self) -> dict:
        return {"frame": self.frame, "time": round(self.time, 3), "box": list(self.box), "score": round(self.score, 3)}


@dataclass
class Verification:
    """What looking at a redacted video again found."""

    output: Path
    frames: int = 0  # frames looked at (every decoded frame)
    faces: list[FaceLeft] = field(default_factory=list)
    sheet: Path | None = None  # the contact sheet of the faces found (None: none found)
    seconds: float = 0.0
    look: str = "every frame, the redactor's most sensitive look (the frame enlarged for small faces too)"

    @property
    def clean(self) -> bool:
        return not self.faces

    @property
    def frames_with_faces(self) -> list[int]:
        return sorted({f.frame for f in self.faces})

    def line(self) -> str:
        if self.clean:
            return f"verified: no face found in {counted(self.frames, 'frame')} of the output"
        frames = self.frames_with_faces
        named = ", ".join(str(f) for f in frames[:SAID_FRAMES]) + (", ..." if len(frames) > SAID_FRAMES else "")
        return (f"verify FAILED: {counted(len(self.faces), 'face')} still found in {len(frames):,} of {counted(self.frames, 'frame')} "
                f"of the output (frame{'s' if len(frames) != 1 else ''} {named})" + (f"; see {self.sheet}" if self.sheet else ""))

    def to_dict(self) -> dict:
        return {"output": str(self.output), "clean": self.clean, "frames": self.frames, "frames_with_faces": self.frames_with_faces,
                "faces": [f.to_dict() for f in self.faces], "sheet": str(self.sheet) if self.sheet else None,
                "seconds": round(self.seconds, 3), "look": self.look}


def verify_output(out: Path, detector: FaceDetector, sheet: Path | None = None, progress: FrameProgress | None = None,
                  decode_max_side: int = IndexSettings.decode_max_side) -> Verification:
    """Every frame of the video `out`, upright and no larger than `decode_max_side` (as the analysis decodes it), seen by
    `detector`; a contact sheet of the faces found is written to `sheet` (default OUT.verify.png) when there are any."""
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
                for face in detector.detect(small):
                    b = face.box
                    box = tuple(int(round(v / scale)) for v in (b.x1, b.y1, b.x2, b.y2))
                    left = FaceLeft(index, seconds, box, float(face.score))
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

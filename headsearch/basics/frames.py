"""A video's frame at a presentation time, and a head boxed on a frame: what pictures of hits and the compare report show."""
from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from headsearch.basics.errors import MediaError

MAX_SIDE = 960  # pictures are no larger than this (long side)
BOX_COLOUR = (40, 230, 40)  # RGB


def frame_at(path: Path, time: float) -> np.ndarray:
    """The frame a player shows at `time` (presentation time, seconds): the last frame whose
    PyAV `frame.time` is not after it, as RGB at the file's own size."""
    import av

    from headsearch.basics.quiet import native_stderr_silenced

    try:
        with native_stderr_silenced(), av.open(str(path)) as container:
            stream = container.streams.video[0]  # no frame threads: freeing a codec whose frame threads are mid-way deadlocks
            if stream.time_base:
                container.seek(max(0, int((time - 0.5) / stream.time_base)), stream=stream, backward=True, any_frame=False)
            best = None
            for frame in container.decode(stream):
                if frame.time is None:
                    continue
                if frame.time > time + 1e-3:
                    if best is None:
                        best = frame
                    break
                best = frame
            if best is None:
                raise MediaError(f"{path}: no frame at {time:.3f} s")
            return best.to_ndarray(format="rgb24")
    except (av.error.FFmpegError, IndexError, ValueError) as e:
        raise MediaError(f"{path}: cannot decode the frame at {time:.3f} s", detail=str(e)) from e


def draw_box(rgb: np.ndarray, box: tuple[float, float, float, float], max_side: int = MAX_SIDE) -> np.ndarray:
    """A copy no larger than `max_side` with the box drawn (clipped to the picture, never smeared)."""
    h, w = rgb.shape[:2]
    scale = min(1.0, max_side / max(h, w))
    image = cv2.resize(rgb, (round(w * scale), round(h * scale)), interpolation=cv2.INTER_AREA) if scale < 1 else rgb.copy()
    x1, y1, x2, y2 = (v * scale for v in box)
    thickness = max(2, round(max(image.shape[:2]) / 320))
    p1 = (int(round(max(0, x1))), int(round(max(0, y1))))
    p2 = (int(round(min(image.shape[1] - 1, x2))), int(round(min(image.shape[0] - 1, y2))))
    cv2.rectangle(image, p1, p2, (0, 0, 0), thickness + 2)
    cv2.rectangle(image, p1, p2, BOX_COLOUR, thickness)
    return image

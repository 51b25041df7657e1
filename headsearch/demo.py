"""The bundled demo: a video made from photos that ship inside installed packages (insightface's
sample images), indexed and queried with the default models. Needs no data beyond the install."""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np

from headsearch.basics.errors import HeadsearchError
from headsearch.basics.images import read_image_rgb
from headsearch.detection.faces import FaceDetector

FPS = 25
SIZE = (640, 360)


def sample_images() -> dict[str, Path]:
    """insightface's bundled sample photos."""
    try:
        import insightface
    except ImportError as e:
        raise HeadsearchError(f"the demo needs insightface's sample images: {e}") from e
    folder = Path(os.path.dirname(insightface.__file__)) / "data" / "images"
    images = {p.stem: p for p in folder.glob("*") if p.suffix.lower() in (".jpg", ".png")}
    if "t1" not in images:
        raise HeadsearchError(f"{folder}: insightface sample image t1.jpg is missing")
    return images


def _shot(image: np.ndarray, box: tuple[float, float, float, float], zoom_to: float, seconds: float) -> Iterator[np.ndarray]:
    """A slow Ken-Burns zoom on one region of a photo, letterboxed into SIZE."""
    x1, y1, x2, y2 = box
    n = int(seconds * FPS)
    for i in range(n):
        z = 1.0 + (zoom_to - 1.0) * i / max(1, n - 1)
        cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
        w, h = (x2 - x1) / z, (y2 - y1) / z
        src = np.float32([[cx - w / 2, cy - h / 2], [cx + w / 2, cy - h / 2], [cx - w / 2, cy + h / 2]])
        dst = np.float32([[0, 0], [SIZE[0], 0], [0, SIZE[1]]])
        yield cv2.warpAffine(image, cv2.getAffineTransform(src, dst), SIZE, borderMode=cv2.BORDER_CONSTANT)


def _region(face_box, aspect: float, scale: float) -> tuple[float, float, float, float]:
    cx, cy = face_box.center
    h = face_box.height * scale
    w = h * aspect
    return (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)


def make_demo_video(out: Path) -> tuple[Path, Path, list[str]]:
    """Write demo.mp4 (four shots) and a query photo; returns their paths and the shot plan."""
    import av

    images = sample_images()
    group = read_image_rgb(images["t1"])
    faces = sorted(FaceDetector().detect(group), key=lambda f: f.box.x1)
    if len(faces) < 3:
        raise HeadsearchError("demo: fewer than three faces found in insightface's t1.jpg")
    aspect = SIZE[0] / SIZE[1]
    h, w = group.shape[:2]
    target, other = faces[1], faces[-1]
    plan = [
        ("group photo, everyone", (0.0, 0.0, float(w), w / aspect), 1.1),
        (f"close-up on person 2 of {len(faces)}", _region(target.box, aspect, 3.0), 1.3),
        (f"close-up on person {len(faces)} of {len(faces)}", _region(other.box, aspect, 3.0), 1.3),
    ]
    out.mkdir(parents=True, exist_ok=True)
    video = out / "demo.mp4"
    container = av.open(str(video), "w")
    stream = container.add_stream("libx264" if "libx264" in av.codecs_available else "mpeg4", rate=FPS)
    stream.width, stream.height, stream.pix_fmt = SIZE[0], SIZE[1], "yuv420p"
    for _, box, zoom in plan:
        for frame in _shot(group, box, zoom, 2.0):
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
    for packet in stream.encode():
        container.mux(packet)
    container.close()
    # The query: person 2 cut from the photo at another scale, mirrored, slightly rotated.
    x1, y1, x2, y2 = _region(target.box, 1.0, 1.8)
    crop = group[max(0, int(y1)) : int(y2), max(0, int(x1)) : int(x2)][:, ::-1]
    rot = cv2.getRotationMatrix2D((crop.shape[1] / 2, crop.shape[0] / 2), 6, 1.0)
    crop = cv2.warpAffine(np.ascontiguousarray(crop), rot, (crop.shape[1], crop.shape[0]), borderMode=cv2.BORDER_REFLECT)
    query = out / "query-person2.jpg"
    cv2.imwrite(str(query), cv2.cvtColor(crop, cv2.COLOR_RGB2BGR))
    return video, query, [p[0] for p in plan]

"""Property-based fuzzing (hypothesis, bounded and derandomised for CI) of the image and video
readers over mutated bytes of real files from ../shared/data: whatever the bytes, a reader returns
frames of the shape it announced within the limits, or raises MediaError; nothing else."""
from __future__ import annotations

import tempfile
from pathlib import Path

import cv2
import numpy as np
import pytest
from clips import remux
from conftest import AMY_DIR, DATA, needs_data
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headsearch.basics.errors import MediaError
from headsearch.basics.images import image_header, jpeg_header, read_image_rgb
from headsearch.basics.settings import MediaLimits
from indexer.decode import VideoStream

pytestmark = [needs_data, pytest.mark.slow]

SEEDS = {
    "jpg": DATA / "face_recognition" / "examples" / "obama_small.jpg",
    "png": AMY_DIR / "amy1.png",
    "mp4": DATA / "more" / "dreamtalk" / "data" / "style_clip" / "video" / "M030_front_neutral_level1_001.mp4",
}
LIMITS = MediaLimits()
MAX_FRAMES = 40  # frames read per mutated video (the seed clip has more): enough to cross several packets
FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# One edit: (kind, where, how many bytes, bytes to write, near the start). `where` is taken modulo
# the file's length (hypothesis likes small numbers: those land at the start, large ones anywhere);
# `near_start` aims at the first 512 bytes, where headers (sizes, counts, codecs) live. In-place
# edits come more often than ones that shift every later offset.
edit = st.tuples(st.sampled_from(["flip", "flip", "overwrite", "overwrite", "delete", "insert", "duplicate", "truncate"]),
                 st.integers(0, 2**31), st.integers(1, 2048), st.binary(min_size=1, max_size=64),
                 st.sampled_from([False, False, False, True]))
edits = st.lists(edit, min_size=1, max_size=6)


def mutate(data: bytes, ops) -> bytes:
    out = bytearray(data)
    for kind, where, length, payload, near_start in ops:
        if not out:
            break
        at = where % (min(len(out), 512) if near_start else len(out))
        if kind == "flip":
            out[at] ^= payload[0] or 0xFF
        elif kind == "overwrite":
            out[at:at + len(payload)] = payload
        elif kind == "delete":
            del out[at:at + length]
        elif kind == "insert":
            out[at:at] = payload
        elif kind == "duplicate":
            out[at:at] = out[at:at + length]
        else:
            del out[max(1, at):]
    return bytes(out)


@pytest.fixture(scope="module")
def workdir():
    with tempfile.TemporaryDirectory(prefix="headsearch-fuzz-") as d:
        yield Path(d)


def check_image(path: Path) -> None:
    try:
        rgb = read_image_rgb(path, LIMITS)
    except MediaError as e:
        assert str(e).startswith(f"{path}: ") and "\n" not in str(e)
        # Never stricter than OpenCV alone: what it decodes whole within the limits is read.
        whole = cv2.imdecode(np.fromfile(str(path), np.uint8), cv2.IMREAD_COLOR) if path.stat().st_size else None
        assert whole is None or min(whole.shape[:2]) < LIMITS.min_side or whole.size > 3 * LIMITS.max_image_pixels, str(e)
        return
    assert rgb.dtype == np.uint8 and rgb.ndim == 3 and rgb.shape[2] == 3 and rgb.flags.c_contiguous
    assert min(rgb.shape[:2]) >= LIMITS.min_side and rgb.shape[0] * rgb.shape[1] <= LIMITS.max_image_pixels


@pytest.mark.parametrize("kind", ["jpg", "png"])
def test_image_reader_on_mutated_photos(kind, workdir):
    seed = SEEDS[kind].read_bytes()
    path = workdir / f"mutated.{kind}"

    @FUZZ
    @given(ops=edits)
    def property_(ops):
        path.write_bytes(mutate(seed, ops))
        check_image(path)

    property_()


def check_video(path: Path) -> None:
    try:
        stream = VideoStream(path, limits=LIMITS)
        last = -np.inf
        for n, frame in enumerate(stream):
            assert frame.rgb.shape == (stream.info.height, stream.info.width, 3) and frame.rgb.dtype == np.uint8
            assert np.isfinite(frame.time) and frame.time > last and abs(frame.time) <= LIMITS.max_video_duration_s
            last = frame.time
            if n + 1 >= MAX_FRAMES:
                break
    except MediaError as e:
        assert "\n" not in str(e)


# MP4 (its index at the end), Matroska, and MPEG-TS (slower to probe when damaged: fewer examples).
@pytest.mark.parametrize(("container", "examples"), [("mp4", 300), ("matroska", 300), ("mpegts", 60)])
def test_video_reader_on_mutated_clips(container, examples, workdir):
    src = SEEDS["mp4"]
    seed = (src if container == "mp4" else remux(src, workdir / f"seed.{container}", fmt=container)).read_bytes()
    path = workdir / f"mutated.{ {'mp4': 'mp4', 'matroska': 'mkv', 'mpegts': 'ts'}[container] }"

    @settings(FUZZ, max_examples=examples)
    @given(ops=edits)
    def property_(ops):
        path.write_bytes(mutate(seed, ops))
        check_video(path)

    property_()


@FUZZ
@given(data=st.binary(max_size=600), prefix=st.sampled_from([b"", b"\xff\xd8", b"\xff\xd8\xff\xc0\x00\x11\x08",
                                                               b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"]))
def test_header_parsers_never_raise(data, prefix):
    blob = np.frombuffer(prefix + data, np.uint8)
    for header in (jpeg_header(blob), _safe_image_header(blob)):
        if header is not None:
            assert header.width >= 0 and header.height >= 0


def _safe_image_header(blob: np.ndarray):
    try:
        return image_header(blob, LIMITS)
    except MediaError:  # Pillow's own decompression-bomb refusal, as a line
        return None

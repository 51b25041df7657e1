"""Tests for indexer.shots: HSV histograms and the online shot-boundary detector."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from clips import clip_info, frames_of, write_clip
from conftest import DATA as DATA_DIR
from conftest import made_picture

from indexer.shots import ShotBoundaryDetector, histogram_distance, hsv_histogram

HAMILTON = "face_recognition/examples/short_hamilton_clip.mp4"
GOLDENEYE = "PySceneDetect/tests/resources/goldeneye-vfr-drop3.mp4"
CROWD = "facenet-pytorch/examples/video.mp4"
# A sample of the talking-head clips (all ten give no cut; these five cover square, landscape,
# strong head turns (d3) and the largest non-cut distances (d10, d20)).
TALKING_HEADS = [
    *(f"video-retalking/examples/face/{i}.mp4" for i in (1, 4)),
    *(f"LivePortrait/assets/examples/driving/{d}.mp4" for d in ("d3", "d10", "d20")),
]


# ---------------------------------------------------------------------------------------------
# helpers


def _media(rel: str) -> Path:
    """Path of a test medium, skipping the test when the data folder or the file is absent."""
    path = DATA_DIR / rel
    if not DATA_DIR.is_dir():
        pytest.skip(f"test media folder {DATA_DIR} not found (set HEADSEARCH_TEST_DATA)")
    if not path.is_file():
        pytest.skip(f"test medium {path} not found")
    return path


def _even_size(width: int, height: int, long_side: int | None) -> dict[str, int]:
    """Decoder output size keeping the aspect ratio, long side `long_side` (no upscaling)."""
    if long_side is None or max(width, height) <= long_side:
        return {}
    scale = long_side / max(width, height)
    return {"width": max(2, round(width * scale / 2) * 2), "height": max(2, round(height * scale / 2) * 2)}


def _decode(path: Path, long_side: int | None = None) -> Iterator[np.ndarray]:
    """Every frame in decode order as RGB uint8, with decord, falling back to PyAV."""
    try:
        import decord

        probe = decord.VideoReader(str(path))
        height, width = probe[0].shape[:2]
        del probe
        reader = decord.VideoReader(str(path), **_even_size(width, height, long_side))
        frames = (reader.next().asnumpy() for _ in range(len(reader)))
    except Exception:  # decord missing or unable to open the file
        frames = None
    if frames is not None:
        yield from frames
        return
    info = clip_info(path)
    yield from frames_of(path, **_even_size(info.width, info.height, long_side))


def _detect(frames: Iterator[np.ndarray], detector: ShotBoundaryDetector | None = None) -> list[int]:
    """Indexes of the frames the detector flags as shot starts."""
    det = detector or ShotBoundaryDetector()
    return [i for i, frame in enumerate(frames) if det.push(hsv_histogram(frame))]


def _solid(rgb: tuple[int, int, int], rng: np.random.Generator, shape: tuple[int, int] = (72, 128)) -> np.ndarray:
    """A solid colour frame with mild sensor-like noise."""
    frame = np.empty((*shape, 3), np.float32)
    frame[:] = rgb
    frame += rng.normal(0.0, 3.0, frame.shape)
    return np.clip(frame, 0, 255).astype(np.uint8)


def _mix_hist(x: float) -> np.ndarray:
    """Histogram with mass 1-x in one bin and x in another: TV distance between two is |x1 - x2|."""
    hist = np.zeros(256, np.float32)
    hist[0], hist[255] = 1.0 - x, x
    return hist


# ---------------------------------------------------------------------------------------------
# hsv_histogram


def test_histogram_shape_dtype_normalisation() -> None:
    rng = np.random.default_rng(0)
    for shape in [(1, 1, 3), (37, 53, 3), (360, 640, 3), (1080, 1920, 3), (908, 480, 3)]:
        hist = hsv_histogram(rng.integers(0, 256, shape, dtype=np.uint8))
        assert hist.shape == (16, 4, 4)
        assert hist.dtype == np.float32
        assert hist.sum() == pytest.approx(1.0, abs=1e-5)
        assert (hist >= 0).all()


def _solid_frame(rgb: tuple[int, int, int]) -> np.ndarray:
    """A noise-free solid colour frame."""
    frame = np.empty((50, 80, 3), np.uint8)
    frame[:] = rgb
    return frame


def test_histogram_bins_for_pure_colours() -> None:
    # Near-black: one "black" bin, whatever the (noisy) hue and saturation.
    assert hsv_histogram(_solid_frame((0, 0, 0)))[0, 0, 0] == pytest.approx(1.0)
    assert hsv_histogram(_solid_frame((9, 2, 5)))[0, 0, 0] == pytest.approx(1.0)
    # Grey / white has no hue: spread evenly over the 16 hue bins at S bin 0.
    white = hsv_histogram(_solid_frame((255, 255, 255)))
    assert white[:, 0, 3] == pytest.approx(np.full(16, 1 / 16), abs=1e-6)
    # Saturated colours: all mass at S = V = 3, shared between the two hue bins nearest their hue
    # (soft binning; red, hue 0, sits on the circular 15 | 0 edge; blue is OpenCV hue 120 of 180).
    red = hsv_histogram(_solid_frame((255, 0, 0)))
    assert red[[15, 0], 3, 3].sum() == pytest.approx(1.0, abs=1e-6)
    assert red[0, 3, 3] > 0.5
    blue = hsv_histogram(_solid_frame((0, 0, 255)))
    assert blue[[10, 11], 3, 3].sum() == pytest.approx(1.0, abs=1e-6)
    assert int(np.argmax(blue.sum(axis=(1, 2)))) == 10


def test_histogram_soft_binning_is_gradual() -> None:
    # Brightness stepping by one grey level never moves more than a few % of the mass.
    rng = np.random.default_rng(8)
    base = rng.integers(60, 200, (36, 64, 3)).astype(np.int16)
    hists = [hsv_histogram(np.clip(base + k, 0, 255).astype(np.uint8)) for k in range(-50, 50)]
    steps = [histogram_distance(a, b) for a, b in itertools.pairwise(hists)]
    assert max(steps) < 0.05


def test_histogram_nearly_resolution_invariant() -> None:
    rng = np.random.default_rng(1)
    small = rng.integers(0, 256, (27, 48, 3), dtype=np.uint8)
    big = np.repeat(np.repeat(small, 40, axis=0), 40, axis=1)  # 1080 x 1920 blocks
    assert histogram_distance(hsv_histogram(small, size=48), hsv_histogram(big, size=48)) < 0.05


def test_histogram_accepts_non_contiguous_views() -> None:
    rng = np.random.default_rng(2)
    frame = rng.integers(0, 256, (120, 160, 3), dtype=np.uint8)
    view = frame[::2, ::-1]
    assert np.allclose(hsv_histogram(view), hsv_histogram(np.ascontiguousarray(view)))


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros((10, 10), np.uint8),
        np.zeros((10, 10, 4), np.uint8),
        np.zeros((10, 10, 3), np.float32),
        np.zeros((0, 5, 3), np.uint8),
    ],
)
def test_histogram_rejects_bad_input(bad: np.ndarray) -> None:
    with pytest.raises(ValueError):
        hsv_histogram(bad)


def test_histogram_distance_bounds() -> None:
    a, b = _mix_hist(0.0), _mix_hist(1.0)
    assert histogram_distance(a, a) == 0.0
    assert histogram_distance(a, b) == pytest.approx(1.0)
    assert histogram_distance(_mix_hist(0.2), _mix_hist(0.5)) == pytest.approx(0.3)
    with pytest.raises(ValueError):
        histogram_distance(a, np.zeros(10, np.float32))


# ---------------------------------------------------------------------------------------------
# ShotBoundaryDetector on synthetic input


def test_first_frame_is_never_a_cut() -> None:
    det = ShotBoundaryDetector(min_shot_frames=1)
    assert det.push(_mix_hist(0.0)) is False
    assert np.isnan(det.last_distance)
    assert det.push(_mix_hist(1.0)) is True
    det.reset()
    assert det.push(_mix_hist(0.0)) is False
    assert det.frame_index == 0


def test_solid_colour_blocks_cut_exactly_at_boundaries() -> None:
    rng = np.random.default_rng(4)
    colours = [
        (200, 30, 30), (30, 180, 40), (20, 40, 210), (230, 220, 40), (128, 128, 128), (90, 20, 140), (240, 240, 240)
    ]
    lengths = [12, 15, 9, 20, 10, 30, 11]
    frames, boundaries, start = [], [], 0
    for colour, length in zip(colours, lengths, strict=True):
        if start:
            boundaries.append(start)
        frames += [_solid(colour, rng) for _ in range(length)]
        start += length
    assert _detect(iter(frames)) == boundaries


def test_slow_brightness_fade_is_not_a_cut() -> None:
    rng = np.random.default_rng(5)
    h, w = 90, 160
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack([xx / w * 255, yy / h * 255, (xx + yy) / (w + h) * 255], axis=-1)
    base += rng.normal(0.0, 20.0, base.shape)
    gains = np.concatenate([np.linspace(1.0, 0.0, 60), np.linspace(0.0, 1.0, 60), np.linspace(1.0, 0.3, 90)])
    frames = (np.clip(base * g + rng.normal(0.0, 2.0, base.shape), 0, 255).astype(np.uint8) for g in gains)
    det = ShotBoundaryDetector()
    distances = []
    cuts = []
    for i, frame in enumerate(frames):
        if det.push(hsv_histogram(frame)):
            cuts.append(i)
        distances.append(det.last_distance)
    assert cuts == [], f"fade produced cuts at {cuts}"
    assert np.nanmax(distances) < det.threshold


def test_min_shot_frames_respected() -> None:
    rng = np.random.default_rng(6)
    # Colour flips every 3 frames: every flip is a hard cut candidate.
    frames = [_solid((220, 20, 20) if (i // 3) % 2 == 0 else (20, 20, 220), rng) for i in range(60)]
    assert _detect(iter(frames), ShotBoundaryDetector(min_shot_frames=1)) == list(range(3, 60, 3))
    cuts = _detect(iter(frames), ShotBoundaryDetector(min_shot_frames=8))
    assert cuts == [9, 18, 27, 36, 45, 54]
    gaps = np.diff([0, *cuts])
    assert (gaps >= 8).all()


def test_flash_gives_a_single_boundary() -> None:
    rng = np.random.default_rng(7)
    frames = [_solid((60, 90, 120), rng) for _ in range(20)] + [_solid((255, 255, 255), rng)]
    frames += [_solid((60, 90, 120), rng) for _ in range(20)]
    assert _detect(iter(frames)) == [20]


def test_adaptive_ratio_suppresses_jumps_in_busy_footage() -> None:
    # Steady motion of 0.15 per frame, then a 0.35 jump: below 3 x running mean, not a cut.
    xs = [0.3 + (0.15 if i % 2 else 0.0) for i in range(60)]
    busy = ShotBoundaryDetector()
    flags = [busy.push(_mix_hist(x)) for x in xs]
    assert busy.running_mean == pytest.approx(0.15, abs=0.01)
    assert busy.push(_mix_hist(xs[-1] + 0.35)) is False
    assert not any(flags)
    # The same jump after static footage is a cut.
    calm = ShotBoundaryDetector()
    assert not any(calm.push(_mix_hist(0.3)) for _ in range(60))
    assert calm.push(_mix_hist(0.65)) is True


def test_ramping_distances_are_not_a_cut() -> None:
    # Distances growing by 1.5x (< spike_ratio) per frame past the threshold, as in a fast fade.
    det = ShotBoundaryDetector(adaptive_ratio=0.0)
    x, d, flags = 0.0, 0.005, []
    for _ in range(20):
        flags.append(det.push(_mix_hist(x)))
    for _ in range(8):
        d *= 1.5
        x += d
        flags.append(det.push(_mix_hist(x)))
    assert det.last_distance > det.threshold
    assert not any(flags)
    # The same last distance straight after static frames is a cut.
    det = ShotBoundaryDetector(adaptive_ratio=0.0)
    for _ in range(20):
        det.push(_mix_hist(0.0))
    assert det.push(_mix_hist(d)) is True


def test_threshold_is_absolute_floor() -> None:
    det = ShotBoundaryDetector()
    for _ in range(30):
        det.push(_mix_hist(0.5))
    assert det.push(_mix_hist(0.5 + det.threshold * 0.9)) is False  # infinitely above a 0 mean, still not a cut


@pytest.mark.parametrize(
    "kwargs",
    [
        {"threshold": 0.0},
        {"threshold": 1.5},
        {"min_shot_frames": 0},
        {"adaptive_ratio": -1.0},
        {"spike_ratio": -1.0},
        {"window": 0},
    ],
)
def test_invalid_parameters(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        ShotBoundaryDetector(**kwargs)


# ---------------------------------------------------------------------------------------------
# ShotBoundaryDetector on real video (0-based decoded frame indexes)


def _cuts_and_distances(frames: Iterator[np.ndarray]) -> tuple[list[int], np.ndarray]:
    """Detected shot starts and the distance of every frame to the previous one (0 for frame 0)."""
    det = ShotBoundaryDetector()
    cuts, distances = [], []
    for i, frame in enumerate(frames):
        if det.push(hsv_histogram(frame)):
            cuts.append(i)
        distances.append(det.last_distance if i else 0.0)
    return cuts, np.asarray(distances)


@pytest.mark.slow  # real videos
@pytest.mark.parametrize(
    ("rel", "expected"), [(HAMILTON, [20, 82, 211]), (GOLDENEYE, [60, 140])], ids=["hamilton", "goldeneye"]
)
def test_reference_cuts(rel: str, expected: list[int]) -> None:
    cuts, distances = _cuts_and_distances(_decode(_media(rel)))
    assert cuts == expected
    # Keep a margin on both sides of the threshold (measured: cuts >= 0.20, elsewhere <= 0.056).
    threshold = ShotBoundaryDetector().threshold
    others = np.delete(distances, expected)
    assert distances[expected].min() > 1.5 * threshold
    assert others.max() < 0.75 * threshold


def _cuts_over_every_frame(path: Path, long_side: int) -> list[int]:
    """Shot starts in a real video, once every one of its frames went through the detector (a decoder
    that yields nothing, or stops early, must not pass for a video without cuts)."""
    seen = 0

    def counted() -> Iterator[np.ndarray]:
        nonlocal seen
        for frame in _decode(path, long_side):
            seen += 1
            yield frame

    cuts = _detect(counted())
    frames = clip_info(path).frames
    assert seen == frames > 1, (path, seen, frames)
    return cuts


@pytest.mark.slow  # a real video
def test_crowd_has_no_cuts() -> None:
    assert _cuts_over_every_frame(_media(CROWD), long_side=480) == []


@pytest.mark.slow  # real videos
@pytest.mark.parametrize("rel", TALKING_HEADS, ids=[Path(r).parent.name + "/" + Path(r).stem for r in TALKING_HEADS])
def test_talking_heads_have_no_cuts(rel: str) -> None:
    assert _cuts_over_every_frame(_media(rel), long_side=320) == []


@pytest.mark.parametrize("fps", [1, 2, 5, 25])
def test_a_slideshow_is_cut_at_every_new_picture(fps: int, tmp_path) -> None:
    """Six different pictures of 1 s each (issue 43: one shot for a 1-5 fps slideshow, the minimum shot of 8 frames
    swallowing every cut), through the indexer's own decode and detector at the stream's rate."""
    from headsearch.basics.settings import IndexSettings
    from headsearch.detection.faces import FaceDetector
    from headsearch.models import load_embedder
    from indexer.analysis import analyse_file

    frames = [made_picture(seed, 640, 360) for seed in range(6)]
    video = tmp_path / f"slides-{fps}.mp4"
    write_clip(video, [f for f in frames for _ in range(fps)], fps=fps)
    result = analyse_file(video, IndexSettings(), FaceDetector(), load_embedder("fake-pixels"))
    assert [round(s.start_time, 3) for s in result.shots] == [float(i) for i in range(6)]


def test_video_rates_keep_the_tuned_minimum_shot() -> None:
    assert ShotBoundaryDetector.for_rate(29.97).min_shot_frames == ShotBoundaryDetector().min_shot_frames == 8
    assert ShotBoundaryDetector.for_rate(None).min_shot_frames == 8
    assert [ShotBoundaryDetector.for_rate(f).min_shot_frames for f in (1, 2, 5, 10)] == [1, 1, 2, 3]
    assert ShotBoundaryDetector.for_rate(1).spike_ratio == 0 and ShotBoundaryDetector.for_rate(2).spike_ratio == 2

"""A redaction probes its source once, where the request enters (`actions.redact`: size, turns, rate, frames, duration),
and passes that record down: the checks, the analysis, the pass that writes the output and its duration read it instead
of opening the file again. Decoding the frames still opens it, once for each pass over them. Counted by an instrument
on `av.open` (the real function runs), in one `redact --everyone` of a generated clip (fast tier: the tests' fake
detector and `--model fake-pixels`)."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from clips import write_clip
from conftest import run
from fake_detector import mark_face

FAKE = ("--model", "fake-pixels")
FIRST_SEEN = 5  # the face's first frame: after the first sample (frame 0), so that --everyone follows its track back


def _clip(path: Path, frames: int = 30) -> Path:
    rng = np.random.default_rng(5)
    face = rng.integers(60, 200, (44, 36, 3), dtype=np.uint8)

    def frame(i: int) -> np.ndarray:
        rgb = np.full((120, 160, 3), 100, np.uint8) + rng.integers(0, 40, (120, 160, 3), dtype=np.uint8)
        if i >= FIRST_SEEN:
            rgb[30:74, 20 + i:56 + i] = face
            mark_face(rgb, (20 + i, 30, 56 + i, 74))
        return rgb

    return write_clip(path, (frame(i) for i in range(frames)), fps=25, options={"qp": "0"}, pix_fmt="yuv444p")  # lossless: the mark stays


@pytest.fixture
def opens(monkeypatch) -> Counter:
    """Every `av.open` of this test by the path opened (the real function opens it)."""
    import av

    real, counted = av.open, Counter()

    def counting(file, *args, **kwargs):
        counted[str(file)] += 1
        return real(file, *args, **kwargs)

    monkeypatch.setattr(av, "open", counting)
    return counted


def test_everyone_hidden_opens_its_source_once_to_probe_and_once_for_each_pass_over_its_frames(tmp_path, opens):
    """Three opens: the probe, the analysis' decoding, the pass that hides and encodes (--everyone follows each track back
    in a fourth, over the frames before its first sighting). Before: 11 (the header checked and the first frame decoded
    twice before the analysis, both again by the analysis, the header again to follow tracks back, the first frame for
    its turns before the pass, and the output's duration read from the source)."""
    source = _clip(tmp_path / "clip.mp4")
    out = tmp_path / "out.mp4"
    opens.clear()
    run("redact", source, "--everyone", "--out", out, *FAKE)
    trail = json.loads(Path(f"{out}.redactions.json").read_text())
    hidden = {f["frame"] for f in trail["frames"] if f["boxes"]}
    assert hidden >= set(range(FIRST_SEEN, 30))  # the face hidden in every frame it is in: the run did its work
    assert opens[str(source)] == 4, dict(opens)

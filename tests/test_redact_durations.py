"""A redacted output plays as long as its source, in every kind of file redact writes (item 9 of issue 52: ".mkv
outputs of .mp4 sources are 7-64 ms longer"). An AAC encoder's first packet is priming (1,024 samples before the
sound starts, at a negative time that an MP4 edit list hides); Matroska moved the whole file later by that packet
(64 ms at 16 kHz) so that no time was negative, and the output played that much longer, its frames that much later;
and a variable-rate file's frame presented last lasted as long as its packet's step in decoding order (goldeneye's .mkv:
41.7 ms longer). Fast tier: a generated clip with AAC sound, the tests' fake detector and `--model fake-pixels`; slow
tier: goldeneye."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from clips import write_clip
from conftest import DATA, needs_data, run
from fake_detector import mark_face

FAKE = ("--model", "fake-pixels")
RATE = 25


def _clip_with_sound(path: Path, frames: int = 30, sound_s: float = 1.5, sample_rate: int = 16000) -> Path:
    """A clip of moving bars with a marked face (the fake detector's), and `sound_s` of a tone encoded as AAC: its first
    packet, the encoder's priming, lies before time 0."""
    w, h = 160, 120
    rng = np.random.default_rng(3)

    def frame(i: int) -> np.ndarray:
        rgb = np.roll(np.repeat(np.linspace(0, 200, w, dtype=np.uint8)[None, :, None], h, axis=0).repeat(3, axis=2), 3 * i, axis=1)
        rgb = (rgb + rng.integers(0, 21, (h, w, 3), dtype=np.uint8)).astype(np.uint8)
        mark_face(rgb, (10 + i, 20, 54 + i, 74))
        return rgb

    return write_clip(path, (frame(i) for i in range(frames)), fps=RATE, pix_fmt="yuv444p", options={"qp": "0"},
                      tone_s=sound_s, sample_rate=sample_rate)


def _timeline(path: Path) -> tuple[float, list[float], list[float]]:
    """(the container's duration, the video packets' times, the audio packets' times), in seconds."""
    import av

    with av.open(str(path)) as c:
        times: dict[str, list[float]] = {"video": [], "audio": []}
        for packet in c.demux():
            if packet.pts is not None and packet.stream.type in times:
                times[packet.stream.type].append(float(packet.pts * packet.time_base))
        return c.duration / 1e6, sorted(times["video"]), sorted(times["audio"])


@pytest.mark.parametrize("suffix", [".mp4", ".mkv", ".mov"])
def test_an_output_plays_as_long_as_its_source_with_its_frames_and_sound_where_they_were(tmp_path, suffix):
    """The output's container duration is the source's, and each video frame and audio packet is where the source has
    it (to Matroska's millisecond). Before: the .mkv played 1.564 s for 1.5 s, every frame 64 ms late."""
    source = _clip_with_sound(tmp_path / "sound.mp4")
    out = tmp_path / f"out{suffix}"
    run("redact", source, "--everyone", "--out", out, *FAKE)
    (source_s, source_video, source_audio), (out_s, out_video, out_audio) = _timeline(source), _timeline(out)
    assert source_s == pytest.approx(1.5, abs=1e-3) and len(source_video) == 30
    assert out_s == pytest.approx(source_s, abs=1e-3), f"{suffix}: plays {out_s:.4f} s for the source's {source_s:.4f} s"
    assert out_video == pytest.approx(source_video, abs=1e-3)
    assert out_audio == pytest.approx(source_audio, abs=1e-3)


@pytest.mark.slow
@needs_data
def test_a_variable_rate_mkv_output_ends_where_its_source_does(tmp_path):
    """goldeneye's variable-rate frames: a packet's duration is the step to the next in decoding order, so the frame
    presented last lasts two frames by its packet and one by the stream's end; the .mkv, which ends where its last frame
    does, played 41.7 ms longer than its source (10.010 s for 9.968 s)."""
    import av

    source = DATA / "PySceneDetect" / "tests" / "resources" / "goldeneye-vfr-drop3.mp4"
    out = tmp_path / "out.mkv"
    run("redact", source, "--everyone", "--out", out, *FAKE)
    with av.open(str(source)) as a, av.open(str(out)) as b:
        assert b.duration == pytest.approx(a.duration, abs=1000), f"plays {b.duration / 1e6:.4f} s for {a.duration / 1e6:.4f} s"

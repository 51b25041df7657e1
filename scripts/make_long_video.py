"""Make a long 720p H.264 video from the real clips of ../shared/data, for indexing-speed benchmarks.

Every clip is decoded with PyAV, letterboxed into 1280x720 and re-encoded at a constant frame rate
into one file; the clips are played in turn (every other round mirrored, so rounds differ) until the
video lasts at least --minutes. The video is made on demand and never committed:

    python scripts/make_long_video.py /tmp/long.mp4 --minutes 10
    headsearch bench speed --video /tmp/long.mp4
    python scripts/make_long_video.py /tmp/2h.mp4 --minutes 120 --loop /tmp/long.mp4   # packets copied, no encoding
"""
from __future__ import annotations

import argparse
import sys
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data"
VIDEO_NAMES = (".mp4", ".mov", ".mkv", ".webm", ".avi")


def clips(data: Path, min_frames: int = 30) -> list[Path]:
    """Every video under `data` with at least `min_frames` frames, in a fixed order."""
    found = []
    for p in sorted(data.rglob("*")):
        if p.suffix.lower() in VIDEO_NAMES and p.is_file():
            with av.open(str(p)) as c:
                if c.streams.video and (c.streams.video[0].frames or 0) >= min_frames:
                    found.append(p)
    return found


def letterbox(rgb: np.ndarray, width: int, height: int) -> np.ndarray:
    h, w = rgb.shape[:2]
    scale = min(width / w, height / h)
    nw, nh = max(2, round(w * scale)), max(2, round(h * scale))
    out = np.zeros((height, width, 3), np.uint8)
    x, y = (width - nw) // 2, (height - nh) // 2
    out[y : y + nh, x : x + nw] = cv2.resize(rgb, (nw, nh), interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
    return out


def make(out: Path, minutes: float, data: Path, width: int = 1280, height: int = 720, fps: int = 30, crf: int = 23,
         preset: str = "veryfast") -> tuple[int, float]:
    sources = clips(data)
    if not sources:
        raise SystemExit(f"no clips under {data}")
    target = round(minutes * 60 * fps)
    container = av.open(str(out), "w")
    stream = container.add_stream("libx264", rate=fps)
    stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
    stream.options = {"crf": str(crf), "preset": preset}
    stream.codec_context.time_base = Fraction(1, fps)
    written, rounds = 0, 0
    while written < target:
        for clip in sources:
            with av.open(str(clip)) as c:
                for frame in c.decode(video=0):
                    rgb = frame.to_ndarray(format="rgb24")
                    if rounds % 2:
                        rgb = rgb[:, ::-1]
                    vf = av.VideoFrame.from_ndarray(letterbox(rgb, width, height), format="rgb24")
                    vf.pts = written
                    for packet in stream.encode(vf):
                        container.mux(packet)
                    written += 1
            if written >= target:
                break
        rounds += 1
    for packet in stream.encode():
        container.mux(packet)
    container.close()
    return written, written / fps


def loop(out: Path, minutes: float, source: Path) -> tuple[int, float]:
    """Repeat an existing video's packets (no re-encoding) until `out` lasts at least `minutes`."""
    packets, offset = 0, 0
    first = av.open(str(source))
    template = first.streams.video[0]
    tb = template.time_base
    span = int(round(float(template.duration * tb if template.duration else first.duration / 1e6) / tb))
    container = av.open(str(out), "w")
    stream = container.add_stream_from_template(template)
    while float(offset * tb) < minutes * 60:
        with av.open(str(source)) as inp:
            for packet in inp.demux(inp.streams.video[0]):
                if packet.dts is None:
                    continue
                packet.pts += offset
                packet.dts += offset
                packet.stream = stream
                container.mux(packet)
                packets += 1
        offset += span
    container.close()
    first.close()
    return packets, float(offset * tb)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--fps", type=int, default=30)
    ap.add_argument("--loop", type=Path, default=None, help="repeat this video's packets instead of encoding clips")
    args = ap.parse_args(argv)
    if args.loop:
        frames, seconds = loop(args.out, args.minutes, args.loop)
        print(f"{args.out}: {frames} packets, {seconds / 60:.1f} min (packets of {args.loop} repeated)")
        return 0
    frames, seconds = make(args.out, args.minutes, args.data, fps=args.fps)
    print(f"{args.out}: {frames} frames, {seconds / 60:.1f} min, 1280x720 H.264")
    return 0


if __name__ == "__main__":
    sys.exit(main())

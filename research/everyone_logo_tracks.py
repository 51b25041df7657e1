"""Could `redact --everyone` leave a crest or a logo unhidden without leaving a real head? What each track of the
`--everyone` analysis looks like to the rules one might try (issue 52, item 9: the Royal Opera House crest in
facenet-pytorch's crowd, the WH.GOV logo in the hamilton clip).

    python research/everyone_logo_tracks.py ../shared/data --out logo-tracks/ [--made-clips] [--also CLIP.mp4 ...]

For every video of `bench/sets/heads.csv` and `bench/sets/presence.csv` (and any `--also`), the analysis `redact
--everyone` runs (`Redactor.heads(..., identify=False, every_head=True)`: the every-head detector, the unconfirmed
tracks kept, each followed back), then per track, at its sightings (the stored frame, boxes scaled from the analysis'):

- `inner`: the most its grey pixels (the head box at 32 x 32) differ from its first sighting's, in grey levels: how
  still its content is, wherever the box moves;
- `ring`: the same for the ring around it (the box grown by one side each way, the box itself left out);
- `move`: how far its box's centre goes from the first sighting, in head sides (the camera panning moves a crest);
- `keypoints`: the most person keypoints (MoveNet, as the analysis runs it: `KeypointRule`'s side and tiles, score
  0.2, person 0.1) any one person has within the box grown by one side left, right and up and two below;
- whether the evidence rule doubts it, and the share of sightings that show a face.

`--made-clips` adds three clips it writes (into --out) for what the set lacks: a pan over the hamilton clip's dim
audience held still (two of its frames side by side, enlarged twice, the window moving 8 pixels a frame), and a pan
over a wall with posters of people (a head-and-shoulders photo and a whole Biden; then two face-only crops), each 100
frames at 25 fps, from LABELS.csv's photos.

Writes `tracks.json` (one row per track, with the label given below) and `sheet-VIDEO.png` (per track: the numbers and
six crops spread over its sightings) to look at. The labels are by eye, from those sheets: every track a real head
(at least at one sighting) unless named in LABELS; a face in a picture (a poster, a screen) is a face to hide and is
counted with the heads. Then it says, for each rule, how many crest tracks it would leave and how many real heads.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import Counter
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# By eye, from the sheets this writes (every other track is a real head): (video's path ending, track number) -> label.
LABELS = {
    ("facenet-pytorch/examples/video.mp4", 11): "crest",  # the lion's face on the Royal Opera House's arms (RetinaFace: confident)
    ("facenet-pytorch/examples/video.mp4", 21): "crest",  # the crown above it (unconfirmed)
    ("face_recognition/examples/short_hamilton_clip.mp4", 15): "not a head",  # hands and the curtain
    ("face_recognition/examples/short_hamilton_clip.mp4", 16): "not a head",
    ("face_recognition/examples/short_hamilton_clip.mp4", 17): "not a head",
    ("PySceneDetect/tests/resources/goldeneye-vfr-drop3.mp4", 1): "face in a picture",  # a face on a monitor
    ("PySceneDetect/tests/resources/goldeneye-vfr-drop3.mp4", 3): "face in a picture",
    ("PySceneDetect/tests/resources/goldeneye-vfr-drop3.mp4", 2): "not a head",  # lights out of focus
    ("LivePortrait/assets/examples/source/s18.mp4", 3): "not a head",  # a plant
}
HIDE = ("head", "face in a picture")  # what a rule must never leave


def videos(root: Path) -> list[Path]:
    sets = Path(__file__).resolve().parents[1] / "bench" / "sets"
    names: set[str] = set()
    for name in ("heads.csv", "presence.csv"):
        with open(sets / name, newline="") as f:
            names |= {row["file"] for row in csv.DictReader(f)}
    return [root / n for n in sorted(names)]


def _frames(path: Path, wanted: set[int]) -> dict[int, np.ndarray]:
    import av

    got: dict[int, np.ndarray] = {}
    with av.open(str(path)) as c:
        for i, frame in enumerate(c.decode(video=0)):
            if i in wanted:
                got[i] = frame.to_ndarray(format="rgb24")
            if i >= max(wanted):
                break
    return got


def _crop(img: np.ndarray, box, grow: float = 0.0, side: int = 32) -> np.ndarray | None:
    h, w = img.shape[:2]
    x1, y1, x2, y2 = box
    bw, bh = x2 - x1, y2 - y1
    x1, y1, x2, y2 = max(0, int(x1 - grow * bw)), max(0, int(y1 - grow * bh)), min(w, int(x2 + grow * bw)), min(h, int(y2 + grow * bh))
    if x2 - x1 < 2 or y2 - y1 < 2:
        return None
    return cv2.resize(img[y1:y2, x1:x2], (side, side), interpolation=cv2.INTER_AREA)


def _keypoints_near(people: np.ndarray, box, rule) -> int:
    x1, y1, x2, y2 = box
    s = max(x2 - x1, y2 - y1)
    most = 0
    for person in people:
        if person[55] < rule.person_min:
            continue
        kp = person[:51].reshape(17, 3)
        near = (kp[:, 2] >= rule.keypoint_min) & (kp[:, 0] >= x1 - s) & (kp[:, 0] <= x2 + s) & (kp[:, 1] >= y1 - s) & (kp[:, 1] <= y2 + 2 * s)
        most = max(most, int(near.sum()))
    return most


def measure(path: Path, name: str, redactor, pose, out: Path) -> list[dict]:
    from actions.redact_whom import sighting_faces
    from headsearch.detection.keypoints import KeypointRule

    rule = KeypointRule()
    heads = redactor.heads(path, identify=False, every_head=True)
    frames = _frames(path, {f for t in heads.tracks for f, _ in t.sightings})
    height, width = next(iter(frames.values())).shape[:2]
    sx, sy = width / heads.size[0], height / heads.size[1]
    people = {f: pose.people(cv2.resize(img, tuple(heads.size), interpolation=cv2.INTER_AREA), rule.side, rule.tiles) for f, img in frames.items()}
    rows, strips = [], []
    for t in heads.tracks:
        seen = [(f, b) for f, b in t.sightings if f in frames]
        scaled = [(f, (b.x1 * sx, b.y1 * sy, b.x2 * sx, b.y2 * sy)) for f, b in seen]
        greys = [cv2.cvtColor(frames[f], cv2.COLOR_RGB2GRAY).astype(np.float32) for f, _ in scaled]
        inner = [c for c in (_crop(g, b) for g, (_, b) in zip(greys, scaled, strict=True)) if c is not None]
        rings = []
        for g, (_, b) in zip(greys, scaled, strict=True):
            r = _crop(g, b, grow=1.0)
            if r is not None:
                r[8:24, 8:24] = np.nan
                rings.append(r)
        centres = [((b[0] + b[2]) / 2, (b[1] + b[3]) / 2) for _, b in scaled]
        side = float(np.median([b[2] - b[0] for _, b in scaled])) if scaled else 1.0
        faced = sighting_faces(t.rows, t.sighting_keys)
        row = {"video": name, "track": t.key, "label": LABELS.get((name, t.key), "head"), "sightings": len(scaled),
               "start": round(t.start, 2), "end": round(t.end, 2), "box": [round(v) for v in scaled[0][1]] if scaled else None,
               "inner": round(max(float(np.mean(np.abs(c - inner[0]))) for c in inner[1:]), 1) if len(inner) > 1 else None,
               "ring": round(max(float(np.nanmean(np.abs(r - rings[0]))) for r in rings[1:]), 1) if len(rings) > 1 else None,
               "move": round(max(float(np.hypot(x - centres[0][0], y - centres[0][1])) for x, y in centres) / max(side, 1.0), 2) if centres else 0.0,
               "keypoints": max((_keypoints_near(people[f], b.as_tuple(), rule) for f, b in seen), default=0),
               "faced": round(sum(faced) / len(faced), 2) if faced else 0.0, "doubt": t.doubt}
        rows.append(row)
        picks = [scaled[i] for i in np.linspace(0, len(scaled) - 1, min(6, len(scaled))).round().astype(int)] if scaled else []
        tiles = [c if (c := _crop(frames[f], b, grow=0.3, side=96)) is not None else np.zeros((96, 96, 3), np.uint8) for f, b in picks]
        tiles += [np.zeros((96, 96, 3), np.uint8)] * (6 - len(tiles))
        text = np.full((96, 300, 3), 255, np.uint8)
        for k, line in enumerate([f"track {t.key} ({row['label']}) {row['box']}", f"inner {row['inner']} ring {row['ring']}",
                                  f"move {row['move']} keypoints {row['keypoints']}", (t.doubt or "confirmed")[:45]]):
            cv2.putText(text, line, (3, 18 + 22 * k), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (0, 0, 0), 1)
        strips.append(np.hstack([text, *tiles]))
    if strips:
        cv2.imwrite(str(out / f"sheet-{name.replace('/', '+')}.png"), cv2.cvtColor(np.vstack(strips), cv2.COLOR_RGB2BGR))
    return rows


def made_clips(root: Path, out: Path) -> list[Path]:
    """The three clips of `--made-clips` (see the module's docstring)."""
    import av

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from clips import write_clip

    from headsearch.detection.faces import FaceDetector

    rng = np.random.default_rng(0)

    def pan(canvas: np.ndarray, step: int, path: Path) -> Path:
        def frames():
            for i in range(100):
                f = canvas[:720, 40 + step * i:40 + step * i + 1280]
                yield np.clip(f.astype(int) + rng.integers(-2, 3, f.shape), 0, 255).astype(np.uint8)
        return write_clip(path, frames(), fps=25)

    held = {75: None, 252: None}  # shot 1 at 2.5 s, shot 3 at 8.4 s
    with av.open(str(root / "face_recognition/examples/short_hamilton_clip.mp4")) as c:
        for i, frame in enumerate(c.decode(video=0)):
            if i in held:
                held[i] = frame.to_ndarray(format="rgb24")
            if i >= max(held):
                break
    audience = np.hstack([cv2.resize(held[k], (1280, 720), interpolation=cv2.INTER_CUBIC) for k in sorted(held)])
    photos = root / "face_recognition/examples/knn_examples/train"
    obama, biden = (cv2.cvtColor(cv2.imread(str(photos / p)), cv2.COLOR_BGR2RGB) for p in ("obama/obama.jpg", "biden/biden.jpg"))
    wall = np.clip(np.full((900, 2600, 3), (205, 200, 190), np.int32) + rng.integers(-40, 41, (900, 2600, 3)), 0, 255).astype(np.uint8)
    posters, faces = wall.copy(), wall.copy()
    posters[140:440, 700:940] = cv2.resize(obama, (240, 300))
    posters[190:370, 1500:1650] = cv2.resize(biden, (150, 180))
    detector = FaceDetector()
    for photo, x0 in ((obama, 700), (biden, 1500)):
        f = max(detector.detect(photo), key=lambda d: d.score).box
        cx, cy, s = (f.x1 + f.x2) / 2, (f.y1 + f.y2) / 2, max(f.x2 - f.x1, f.y2 - f.y1) * 1.15
        faces[190:390, x0:x0 + 200] = cv2.resize(photo[int(cy - s / 2):int(cy + s / 2), int(cx - s / 2):int(cx + s / 2)], (200, 200))
    return [pan(audience, 8, out / "pan_over_still_audience.mp4"), pan(posters, 10, out / "posters_pan.mp4"),
            pan(faces, 10, out / "face_posters_pan.mp4")]


RULES = {
    "still (2+ sightings, inner <= 17.3)": lambda r: r["inner"] is not None and r["inner"] <= 17.3,
    "no keypoints near at any sighting": lambda r: r["keypoints"] == 0,
    "still and no keypoints": lambda r: r["inner"] is not None and r["inner"] <= 17.3 and r["keypoints"] == 0,
    "still, no keypoints, moved 1+ head side": lambda r: r["inner"] is not None and r["inner"] <= 17.3 and r["keypoints"] == 0 and r["move"] >= 1.0,
}


def report(rows: list[dict]) -> list[str]:
    lines = [f"{len(rows)} tracks: {dict(Counter(r['label'] for r in rows))}"]
    for name, rule in RULES.items():
        left = [r for r in rows if rule(r)]
        c = Counter(r["label"] for r in left)
        heads = ", ".join(f"{r['video']}#{r['track']}" for r in left if r["label"] in HIDE) or "none"
        lines.append(f"{name}: leaves {c['crest']} crest tracks, {sum(c[k] for k in HIDE)} real heads or faces in pictures "
                     f"({heads}), {c['not a head']} other non-heads")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", type=Path, help="the shared data folder (../shared/data)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--made-clips", action="store_true", help="add the clips it makes for what the set lacks")
    ap.add_argument("--also", type=Path, nargs="*", default=[], help="more clips (a pan over a still audience, posters)")
    args = ap.parse_args(argv)
    from actions.redact import Redactor
    from headsearch.detection.keypoints import PoseDetector

    args.out.mkdir(parents=True, exist_ok=True)
    redactor, pose = Redactor.open(), PoseDetector()
    rows: list[dict] = []
    for path in [*videos(args.root), *(made_clips(args.root, args.out) if args.made_clips else []), *args.also]:
        name = str(path.relative_to(args.root)) if path.is_relative_to(args.root) else str(path)
        rows += measure(path, name, redactor, pose, args.out)
        print(f"{name}: {sum(r['video'] == name for r in rows)} tracks", flush=True)
    (args.out / "tracks.json").write_text(json.dumps(rows, indent=1))
    print("\n".join(report(rows)))


if __name__ == "__main__":
    main()

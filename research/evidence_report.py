"""How many head tracks the face-evidence rule drops, and a contact sheet of dropped and kept tracks.

    python research/evidence_report.py ../shared/data --out evidence/

Analyses every video and photo under the given folders exactly as `headsearch index` does
(decode, shots, RetinaFace, tracking, the evidence rule of `indexer/evidence.py`), without
embedding (vectors play no part in which tracks are kept), and writes:

- `evidence.json`: per file, tracks before the rule (kept + dropped), kept, and every dropped
  track with its time range and reason;
- `dropped.png` and `kept.png`: one row per track, its sightings' head crops left to right
  (yellow: face score; red: followed without a face; cyan: found by keypoints, with its score), to look at;
- `keypoints.json` and `keypoints.png`: every track without a confident face that person keypoints found
  (the candidates of the keypoint evidence rule), with what the rule looks at, judged by the rule and, with
  `--all-keypoint-tracks`, kept whatever the rule says (to measure the rule: look at the sheet, label the
  rows, compare).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import indexer.analysis  # noqa: E402
from headsearch.basics.errors import HeadsearchError  # noqa: E402
from headsearch.basics.settings import IndexSettings  # noqa: E402
from headsearch.detection.crops import HeadCrop  # noqa: E402
from headsearch.detection.faces import FaceDetector  # noqa: E402
from headsearch.models.base import Embedder, ModelSpec  # noqa: E402
from indexer.analysis import analyse_file  # noqa: E402
from indexer.evidence import EvidenceCollector, EvidenceRule, confident  # noqa: E402
from indexer.pipeline import discover  # noqa: E402
from schemas.records import HeadSource, HeadTrack, VectorKind  # noqa: E402

TILE = 96
PER_ROW = 10


class NoVectors(Embedder):
    """Embeds nothing useful: which tracks are kept does not depend on vectors."""

    version = "0"

    def __init__(self):
        super().__init__(ModelSpec(name="none", summary="no vectors: which tracks are kept does not depend on them", dims=(1,)))

    def embed(self, crops: Sequence[HeadCrop]) -> dict[VectorKind, np.ndarray]:
        return {VectorKind.ID: np.ones((len(crops), 1), np.float32)}


def track_row(path: Path, track: HeadTrack, label: str) -> np.ndarray:
    tiles = []
    for o in track.observations[:PER_ROW]:
        if o.crop_jpeg is None:
            tile = np.zeros((TILE, TILE, 3), np.uint8)
        else:
            tile = cv2.resize(cv2.imdecode(np.frombuffer(o.crop_jpeg, np.uint8), cv2.IMREAD_COLOR), (TILE, TILE))
        if o.face:
            text, colour = f"{o.time:.2f} {o.face.score:.2f}", (0, 255, 255)
        elif o.found_by == HeadSource.KEYPOINTS:
            text, colour = f"{o.time:.2f} k{o.keypoint_score or 0:.2f}", (255, 255, 0)
        else:
            text, colour = f"{o.time:.2f} -", (0, 0, 255)
        cv2.putText(tile, text, (2, TILE - 5), cv2.FONT_HERSHEY_SIMPLEX, 0.35, colour, 1)
        tiles.append(tile)
    tiles += [np.zeros((TILE, TILE, 3), np.uint8)] * (PER_ROW - len(tiles))
    head = np.zeros((TILE, 260, 3), np.uint8)
    for i, line in enumerate([path.name[-38:], f"{track.start:.2f}-{track.end:.2f}s  {len(track.observations)} sightings",
                              label[:40], label[40:80]]):
        cv2.putText(head, line, (3, 16 + 20 * i), cv2.FONT_HERSHEY_SIMPLEX, 0.38, (255, 255, 255), 1)
    return np.hstack([head] + tiles)


def keypoint_features(track: HeadTrack) -> dict:
    """What the keypoint evidence rule can look at in a track without a confident face."""
    kp = [o for o in track.observations if o.found_by == HeadSource.KEYPOINTS]
    return {"start": round(track.start, 3), "end": round(track.end, 3), "sightings": len(track.observations),
            "keypoint_sightings": len(kp), "followed": sum(o.found_by == HeadSource.FOLLOWED for o in track.observations),
            "faces": sum(o.face is not None for o in track.observations),
            "best_keypoint_score": round(max((o.keypoint_score or 0.0 for o in kp), default=0.0), 3),
            "mean_keypoint_score": round(float(np.mean([o.keypoint_score or 0.0 for o in kp])) if kp else 0.0, 3),
            "head_px": round(float(np.median([o.head.width for o in track.observations])), 1),
            "seconds": round(track.observations[-1].time - track.observations[0].time, 3)}


def by_keypoints(track: HeadTrack) -> bool:
    """A track the keypoint evidence rule judges: found by keypoints, no confident face."""
    return any(o.found_by == HeadSource.KEYPOINTS for o in track.observations) and not any(
        o.face is not None and confident(o.face) for o in track.observations)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=Path("evidence"))
    ap.add_argument("--all-keypoint-tracks", action="store_true",
                    help="keep every keypoint track whatever the keypoint evidence rule says (to measure the rule)")
    args = ap.parse_args()
    if args.all_keypoint_tracks:
        permissive = EvidenceRule(min_keypoint_sightings=1, keypoint_score=0.0, static_min_sightings=10**6)
        indexer.analysis.EvidenceCollector = lambda: EvidenceCollector(permissive)  # the analysis makes its own
    args.out.mkdir(parents=True, exist_ok=True)
    settings = IndexSettings()
    detector = FaceDetector.from_settings(settings)
    files, problems, _ = discover(args.folders)
    report = {"files": {}, "problems": problems}
    dropped_rows, kept_rows, keypoint_rows, keypoint_tracks = [], [], [], []
    for n, path in enumerate(files, 1):
        try:
            result = analyse_file(path, settings, detector, NoVectors(), keep_crops=True)
        except HeadsearchError as e:
            report["problems"].append(str(e))
            continue
        report["files"][str(path)] = {
            "kind": str(result.kind), "before": len(result.tracks) + len(result.dropped_tracks), "kept": len(result.tracks),
            "dropped": [{"start": round(t.start, 3), "end": round(t.end, 3), "sightings": len(t.observations), "why": why}
                        for t, why in result.dropped_tracks],
        }
        dropped_rows += [track_row(path, t, why) for t, why in result.dropped_tracks]
        if result.kind == "video":
            kept_rows += [track_row(path, t, "kept") for t in result.tracks]
        for t, why in [(t, None) for t in result.tracks] + list(result.dropped_tracks):
            if by_keypoints(t):
                f = {"file": str(path), "row": len(keypoint_rows), "kept": why is None, "why": why, **keypoint_features(t)}
                keypoint_tracks.append(f)
                keypoint_rows.append(track_row(path, t, f"#{f['row']} {'kept' if why is None else 'dropped'} kp {f['keypoint_sightings']} "
                                                        f"best {f['best_keypoint_score']:.2f} {f['head_px']:.0f}px"))
        print(f"{n}/{len(files)} {path}: {len(result.tracks)} kept, {len(result.dropped_tracks)} dropped", file=sys.stderr)
    files_ = report["files"].values()
    report["totals"] = {
        kind: {"files": sum(f["kind"] == kind for f in files_), "before": sum(f["before"] for f in files_ if f["kind"] == kind),
               "kept": sum(f["kept"] for f in files_ if f["kind"] == kind),
               "dropped": sum(len(f["dropped"]) for f in files_ if f["kind"] == kind)}
        for kind in ("video", "image")
    }
    (args.out / "evidence.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / "keypoints.json").write_text(json.dumps(keypoint_tracks, indent=1) + "\n")
    for name, rows in (("dropped.png", dropped_rows), ("kept.png", kept_rows), ("keypoints.png", keypoint_rows)):
        if rows:
            cv2.imwrite(str(args.out / name), np.vstack(rows))
    print(json.dumps(report["totals"], indent=1))


if __name__ == "__main__":
    main()

"""How many head tracks the face-evidence rule drops, and a contact sheet of dropped and kept tracks.

    python scripts/evidence_report.py ../shared/data --out evidence/

Analyses every video and photo under the given folders exactly as `headsearch index` does
(decode, shots, RetinaFace, tracking, the evidence rule of `indexer/evidence.py`), without
embedding (vectors play no part in which tracks are kept), and writes:

- `evidence.json`: per file, tracks before the rule (kept + dropped), kept, and every dropped
  track with its time range and reason;
- `dropped.png` and `kept.png`: one row per track, its sightings' head crops left to right
  (yellow: face score; red: followed without a face), to look at.
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

from headsearch.basics.errors import HeadsearchError  # noqa: E402
from headsearch.basics.settings import IndexSettings  # noqa: E402
from headsearch.detection.crops import HeadCrop  # noqa: E402
from headsearch.detection.faces import FaceDetector  # noqa: E402
from headsearch.models.base import Embedder  # noqa: E402
from indexer.analysis import analyse_file  # noqa: E402
from indexer.pipeline import discover  # noqa: E402
from schemas.records import HeadTrack, VectorKind  # noqa: E402

TILE = 96
PER_ROW = 10


class NoVectors(Embedder):
    """Embeds nothing useful: which tracks are kept does not depend on vectors."""

    name, version, dim = "none", "0", 1

    def embed(self, crops: Sequence[HeadCrop]) -> dict[VectorKind, np.ndarray]:
        return {VectorKind.ID: np.ones((len(crops), 1), np.float32)}


def track_row(path: Path, track: HeadTrack, label: str) -> np.ndarray:
    tiles = []
    for o in track.observations[:PER_ROW]:
        if o.crop_jpeg is None:
            tile = np.zeros((TILE, TILE, 3), np.uint8)
        else:
            tile = cv2.resize(cv2.imdecode(np.frombuffer(o.crop_jpeg, np.uint8), cv2.IMREAD_COLOR), (TILE, TILE))
        text = f"{o.time:.2f} {o.face.score:.2f}" if o.face else f"{o.time:.2f} -"
        cv2.putText(tile, text, (2, TILE - 5), cv2.FONT_HERSHEY_SIMPLEX, 0.35, (0, 255, 255) if o.face else (0, 0, 255), 1)
        tiles.append(tile)
    tiles += [np.zeros((TILE, TILE, 3), np.uint8)] * (PER_ROW - len(tiles))
    head = np.zeros((TILE, 260, 3), np.uint8)
    for i, line in enumerate([path.name[-38:], f"{track.start:.2f}-{track.end:.2f}s  {len(track.observations)} sightings",
                              label[:40], label[40:80]]):
        cv2.putText(head, line, (3, 16 + 20 * i), cv2.FONT_HERSHEY_SIMPLEX, 0.38, (255, 255, 255), 1)
    return np.hstack([head] + tiles)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=Path("evidence"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    settings = IndexSettings()
    detector = FaceDetector.from_settings(settings)
    files, problems, _ = discover(args.folders)
    report = {"files": {}, "problems": problems}
    dropped_rows, kept_rows = [], []
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
        print(f"{n}/{len(files)} {path}: {len(result.tracks)} kept, {len(result.dropped_tracks)} dropped", file=sys.stderr)
    files_ = report["files"].values()
    report["totals"] = {
        kind: {"files": sum(f["kind"] == kind for f in files_), "before": sum(f["before"] for f in files_ if f["kind"] == kind),
               "kept": sum(f["kept"] for f in files_ if f["kind"] == kind),
               "dropped": sum(len(f["dropped"]) for f in files_ if f["kind"] == kind)}
        for kind in ("video", "image")
    }
    (args.out / "evidence.json").write_text(json.dumps(report, indent=1) + "\n")
    for name, rows in (("dropped.png", dropped_rows), ("kept.png", kept_rows)):
        if rows:
            cv2.imwrite(str(args.out / name), np.vstack(rows))
    print(json.dumps(report["totals"], indent=1))


if __name__ == "__main__":
    main()

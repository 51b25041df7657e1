"""Synthetic other-look (R2) photos for TRAINING the student, from permissively licensed material only.

The student's dataset from the permissive sources has almost no real other-look pairs (Obama's two labelled states:
6 R2 pairs in 600 samples), and its same-look pairs are frames of one clip (same scene, same light) while strangers come
from other clips, so the scene alone separates them (docs/lite0-fusion.md). This script writes, as labelled photos
for `headsearch build-dataset --labels`, what research/fit_head_regions.py builds for its primary fitting set `fit`,
restricted to ../shared/data outside more/ (the MIT / Apache-2.0 repositories face_recognition, video-retalking,
LivePortrait; nothing held out):

* per labelled one-person video, FRAMES_PER_VIDEO face frames of its person's track, each with its background replaced
  (GrabCut mask, one of a shared pool of 16 backgrounds) and a photometric change: same look as the clip (state as
  labelled), another scene;
* three drawn look changes of that person (glasses, moustache/beard, recoloured hair; research/synthetic_looks.py) on
  two frames each, scene-randomised the same way: three more looks (state "<state>+synth_<kind>");
* the labelled photos with a photometric change.

Each image is the 256-px head crop the indexer made, written as PNG; `build-dataset` detects its head again.

    python research/synthetic_training_looks.py --split /tmp/split --cache /tmp/synth-cache --out /tmp/synth
    headsearch build-dataset ... --labels /tmp/synth/labels.csv
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import cv2

SCRIPTS = Path(__file__).resolve().parent
sys.path.insert(0, str(SCRIPTS))
sys.path.insert(0, str(SCRIPTS.parent))

import fit_head_fusion as fhf  # noqa: E402
import fit_head_regions as fhr  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", type=Path, required=True, help="research/split_labels.py's output folder")
    ap.add_argument("--cache", type=Path, required=True, help="crop cache folder (fit_head_fusion's crops.pkl)")
    ap.add_argument("--out", type=Path, required=True, help="folder for the PNGs and labels.csv")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    sets, crops, failed = fhr.build_sets(args.split, args.cache, args.seed)
    for line in failed:
        print(f"note: {line}", file=sys.stderr)
    more = str((fhf.DATA / "more").resolve())
    args.out.mkdir(parents=True, exist_ok=True)
    rows, skipped = [], 0
    for n, it in enumerate(sets["fit"]):
        path = it.key.split("#")[0].split("|")[0]
        if str(Path(path).resolve()).startswith(more):
            skipped += 1  # more/ is development material, not for weights that may ship
            continue
        name = f"{n:04d}-{Path(path).stem}-{(it.synthetic or 'real').replace('+', '')}.png"
        cv2.imwrite(str(args.out / name), cv2.cvtColor(crops[it.key].image, cv2.COLOR_RGB2BGR))
        rows.append({"path": name, "identity": it.identity, "appearance_state": it.state or ""})
    with open(args.out / "labels.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["path", "identity", "appearance_state"])
        w.writeheader()
        w.writerows(rows)
    looks = {(r["identity"], r["appearance_state"]) for r in rows}
    print(f"{len(rows)} images of {len({r['identity'] for r in rows})} people in {len(looks)} looks -> {args.out} "
          f"({skipped} from more/ left out)")


if __name__ == "__main__":
    main()

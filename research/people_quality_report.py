"""Measure the people quality gates on an indexed library: what each gate would hold back, against the labels.

    python research/people_quality_report.py LIBRARY LABELS.csv [MORE.csv ...]

For every track: its face height (px), sharpness (variance of the Laplacian of the thumbnail's middle), the face
detector's best score and its sightings with a face (`headsearch.people.quality.measure`). Wrong pairs: two tracks
whose identity vectors score above the library's identity threshold although they are different people (seen in
one frame, or labelled with different identities). Prints the lowest value of each measure over the labelled tracks
(which the gates must keep), the values of the tracks in wrong pairs, and for a few values of each gate what it
would hold back. The defaults of `QualityGates` were chosen from this report on all of ../shared/data.
"""
from __future__ import annotations

import sys
from itertools import combinations
from pathlib import Path

import numpy as np

from bench.people import labelled_tracks
from headsearch.people.persons import people_thresholds
from headsearch.people.quality import DEFAULT_GATES, measure
from headsearch.store.library import Library
from schemas.records import VectorKind

GRID = {"min_face_px": (0, 30, 40, 48, 64), "min_sharpness": (0, 10, 25, 40), "min_face_score": (0, 0.85, 0.9, 0.95),
        "min_faces": (0, 2, 3)}


def main(root: Path, label_csvs: list[Path]) -> None:
    library = Library.open(root)
    with library.people_reading() as store:
        tracks = sorted(store.track_ids())
        quality = {q.track_id: q for q in measure(library.root, store.quality_inputs(tracks))}
        vectors = store.track_vectors(VectorKind.ID, tracks)
        same_frame = {tuple(sorted(p)) for p in store.shared_frame_pairs()}
    labels = {tr: ident for tr, (ident, _) in labelled_tracks(library, label_csvs).items()}
    threshold = people_thresholds(library).identity
    ids = [tr for tr in tracks if tr in vectors]
    sims = np.stack([vectors[tr] for tr in ids]) @ np.stack([vectors[tr] for tr in ids]).T
    pos = {tr: i for i, tr in enumerate(ids)}
    different = {p for p in same_frame if p[0] in pos and p[1] in pos}
    different |= {(a, b) for a, b in combinations(sorted(tr for tr in labels if tr in pos), 2) if labels[a] != labels[b]}
    wrong = sorted((p for p in different if sims[pos[p[0]], pos[p[1]]] > threshold), key=lambda p: -sims[pos[p[0]], pos[p[1]]])
    genuine = {(a, b) for a, b in combinations(sorted(tr for tr in labels if tr in pos), 2) if labels[a] == labels[b]}
    print(f"{len(tracks)} tracks, {len(labels)} labelled; identity threshold {threshold:.3f}; {len(wrong)} wrong pairs above it "
          f"(of {len(different)} known different), {len(genuine)} genuine pairs")
    measures = {"face_px": "min_face_px", "sharpness": "min_sharpness", "face_score": "min_face_score", "faces": "min_faces"}
    for field in measures:
        lab = [getattr(quality[tr], field) for tr in labels if tr in quality and (field != "faces" or not quality[tr].photo)]
        bad = sorted({getattr(quality[tr], field) for p in wrong for tr in p if field != "faces" or not quality[tr].photo})
        print(f"{field:>10}: labelled tracks >= {min(lab, default=float('nan')):.3g}; tracks in wrong pairs: "
              + ", ".join(f"{v:.3g}" for v in bad[:12]) + (" ..." if len(bad) > 12 else ""))
    for name, values in GRID.items():
        for value in values:
            gates = DEFAULT_GATES.__class__(**{**{k: 0 for k in GRID}, name: value})
            held = {tr for tr, q in quality.items() if gates.reason(q) not in (None, "no_face")}
            print(f"{name}={value}: holds back {len(held)} tracks, {len(held & labels.keys())} labelled, "
                  f"{sum(1 for a, b in wrong if a in held or b in held)}/{len(wrong)} wrong pairs, "
                  f"{sum(1 for a, b in genuine if a in held or b in held)}/{len(genuine)} genuine pairs")
    held = {tr for tr, q in quality.items() if DEFAULT_GATES.reason(q) is not None}
    print(f"defaults {DEFAULT_GATES.to_dict()}: hold back {len(held)} tracks, {len(held & labels.keys())} labelled, "
          f"{sum(1 for a, b in wrong if a in held or b in held)}/{len(wrong)} wrong pairs")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), [Path(a) for a in sys.argv[2:]])

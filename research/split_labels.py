"""Split ../shared/data/LABELS.csv by source into a training set and a held-out set whose
identities the models never see (the default model's thresholds and card; see headsearch/models/MODEL_CARD.md).

With --more ../shared/data/more/LABELS.csv, also split that set (photos of 12 people in several looks,
one-person videos) by identity: MORE_HELD_OUT people go to the held-out side. Writes train.csv,
heldout.csv and, with --more, more-train.csv, more-heldout.csv and heldout-all.csv (heldout + more-heldout).
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

from headsearch.evaluation.labels import write_label_set

HELD_OUT_SOURCES = ("face-api.js", "openface")  # photo sets with glasses / hair-style states (R2 pairs)
# People of more/LABELS.csv kept out of training: hair length and sunglasses (halle_berry), beard and long hair
# (keanu_reeves), glasses, beard, moustache and hair (tom_hanks): 78 photos, so that the held-out set has enough
# impostor pairs to measure VR at FAR 1e-3 and enough other-look pairs to mean something.
MORE_HELD_OUT = ("halle_berry", "keanu_reeves", "tom_hanks")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("labels", type=Path)
    parser.add_argument("--more", type=Path, default=None, help="more/LABELS.csv (path,identity,appearance_state)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows = list(csv.DictReader(args.labels.open()))
    base = args.labels.resolve().parent
    args.out.mkdir(parents=True, exist_ok=True)
    sides = {}
    for name, keep in (("train", lambda r: r["source"] not in HELD_OUT_SOURCES), ("heldout", lambda r: r["source"] in HELD_OUT_SOURCES)):
        sides[name] = [(str(base / r["source"] / r["path"]), r["identity"], r["appearance_state"]) for r in filter(keep, rows)]
        write_label_set(args.out / f"{name}.csv", sides[name])
    written = ["train.csv", "heldout.csv"]
    if args.more is not None:
        more = list(csv.DictReader(args.more.open()))
        more_base = args.more.resolve().parent
        held = [(str(more_base / r["path"]), r["identity"], r["appearance_state"]) for r in more if r["identity"] in MORE_HELD_OUT]
        write_label_set(args.out / "more-train.csv",
                        [(str(more_base / r["path"]), r["identity"], r["appearance_state"]) for r in more if r["identity"] not in MORE_HELD_OUT])
        write_label_set(args.out / "more-heldout.csv", held)
        write_label_set(args.out / "heldout-all.csv", sides["heldout"] + held)
        written += ["more-train.csv", "more-heldout.csv", "heldout-all.csv"]
    print(f"wrote {', '.join(str(args.out / n) for n in written)}")


if __name__ == "__main__":
    main()

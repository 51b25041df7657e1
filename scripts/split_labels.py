"""Split ../shared/data/LABELS.csv by source into a training set and a held-out set whose
identities the model never sees (used for the bundled model's card; see README)."""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

from headsearch.labels import write_label_set

HELD_OUT_SOURCES = ("face-api.js", "openface")  # photo sets with glasses / hair-style states (R2 pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("labels", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows = list(csv.DictReader(args.labels.open()))
    base = args.labels.resolve().parent
    args.out.mkdir(parents=True, exist_ok=True)
    for name, keep in (("train", lambda r: r["source"] not in HELD_OUT_SOURCES), ("heldout", lambda r: r["source"] in HELD_OUT_SOURCES)):
        write_label_set(args.out / f"{name}.csv",
                        [(str(base / r["source"] / r["path"]), r["identity"], r["appearance_state"]) for r in filter(keep, rows)])
    print(f"wrote {args.out / 'train.csv'} and {args.out / 'heldout.csv'}")


if __name__ == "__main__":
    main()

"""How well `headsearch people` groups a library: pairwise precision and recall of its persons against
the identities a labelled set gives (a labelled photo: its largest head's track; a video labelled with
one identity: every track in it).

    headsearch bench people --library LIB ../shared/data/LABELS.csv ../shared/data/more/LABELS.csv
    headsearch bench people --library LIB --sweep 0.90,0.92,0.94 SETS...   # on copies, from no people

(`python -m bench.people` with the same arguments runs the same code and prints the JSON, then the lines.)

Pair counts: precision = pairs of labelled tracks in one person that share an identity / pairs in one
person; recall = the same / pairs that share an identity. Every labelled track counts: one in no listed person
(held back by a quality gate, or in a person of too few tracks to be listed: the inbox) is a person of its own,
so what the gates and the listing leave out lowers recall.
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass
from math import comb
from pathlib import Path

from headsearch.basics.files import write_json_atomic
from headsearch.basics.json_text import json_text
from headsearch.evaluation.labels import read_label_set
from headsearch.evaluation.thresholds import THRESHOLDS_FILE
from headsearch.people.listing import list_people
from headsearch.people.persons import update_people
from headsearch.store.library import Library
from headsearch.store.rows import TrackRow
from schemas.records import MediaKind

PEOPLE_PARTS = ("all", "photo", "video")  # the labelled tracks each score is over


def labelled_tracks(library: Library, label_csvs: list[Path]) -> dict[int, tuple[str, str]]:
    """Track id -> (identity, "photo" or "video") for the tracks a labelled set names."""
    wanted: dict[str, tuple[str, MediaKind]] = {}
    for csv in label_csvs:
        for f in read_label_set(Path(csv)).files:
            wanted[str(Path(f.path).resolve())] = (f.identity, f.kind)
    out: dict[int, tuple[str, str]] = {}
    with library.browsing() as b:
        by_video: dict[str, list[TrackRow]] = {}
        for t in b.tracks():
            by_video.setdefault(t.video, []).append(t)
        for path, tracks in by_video.items():
            if path not in wanted:
                continue
            identity, kind = wanted[path]
            if kind == MediaKind.IMAGE:  # the person a photo is labelled with is its largest head
                boxes = {t.id: b.best_sighting(t.id) for t in tracks}
                largest = max(tracks, key=lambda t: (boxes[t.id].x2 - boxes[t.id].x1) * (boxes[t.id].y2 - boxes[t.id].y1))
                out[largest.id] = (identity, "photo")
            else:
                for t in tracks:
                    out[t.id] = (identity, "video")
    return out


def pairwise(assignments: dict[int, int], truth: dict[int, str]) -> dict:
    """Pairwise precision, recall and F1 of clusters against identities, over the tracks in both."""
    tracks = [t for t in truth if t in assignments]
    cells = Counter((assignments[t], truth[t]) for t in tracks)
    clusters = Counter(assignments[t] for t in tracks)
    identities = Counter(truth[t] for t in tracks)
    tp = sum(comb(n, 2) for n in cells.values())
    same_cluster = sum(comb(n, 2) for n in clusters.values())
    same_identity = sum(comb(n, 2) for n in identities.values())
    precision = tp / same_cluster if same_cluster else 1.0
    recall = tp / same_identity if same_identity else 1.0
    return {"tracks": len(tracks), "identities": len(identities), "clusters": len(clusters), "true_pairs": same_identity,
            "clustered_pairs": same_cluster, "correct_pairs": tp, "precision": round(precision, 4), "recall": round(recall, 4),
            "f1": round(2 * precision * recall / (precision + recall), 4) if precision + recall else 0.0}


def people_accuracy(library: Library, label_csvs: list[Path]) -> dict:
    """Pairwise scores of the library's current people: all labelled tracks, photos only, videos only."""
    every = list_people(library, include_hidden=True, with_looks=False, include_unlisted=True)
    listed = [p for p in every if p.listed]
    person = {tr: p.id for p in listed for tr in p.tracks}
    with library.browsing() as b:
        all_tracks = [t.id for t in b.tracks()]
    labelled = labelled_tracks(library, label_csvs)
    waiting = [tr for tr in labelled if tr not in person]
    singles = -1 - max([0, *all_tracks])  # an inbox track is a person of its own
    scored = {**person, **{tr: singles - i for i, tr in enumerate(waiting)}}
    report = {"people": len(listed), "tracks": len(person), "all_tracks": len(all_tracks),
              "unlisted_people": len(every) - len(listed), "single_track_people_unlisted": sum(1 for p in every if not p.listed and len(p.tracks) == 1),
              "inbox_tracks": len(all_tracks) - len(person), "labelled_in_inbox": len(waiting)}
    for part in PEOPLE_PARTS:
        truth = {t: ident for t, (ident, kind) in labelled.items() if part == "all" or kind == part}
        report[part] = pairwise(scored, truth)
    return report


def sweep(library_root: Path, label_csvs: list[Path], thresholds: list[float]) -> list[dict]:
    """Group a copy of the library from no people at each identity threshold."""
    source = Library.open(library_root)
    model = source.model
    rows = []
    with tempfile.TemporaryDirectory(prefix="people-sweep-") as tmp:
        for value in thresholds:
            copy = Path(tmp) / f"lib-{value}"
            shutil.copytree(library_root, copy, ignore=shutil.ignore_patterns(".*.lock"))
            lib = Library.open(copy, read_only=False)
            with lib.people_writing() as store:  # start from no people
                for p in store.persons():
                    store.delete_person(p.id)
            write_json_atomic(copy / THRESHOLDS_FILE, {"far": 0.0, "identity": value, "same_look": 1.0, "model": model.name,
                                                       "version": model.version})
            update_people(lib)
            rows.append({"identity_threshold": value, **people_accuracy(lib, label_csvs)})
            shutil.rmtree(copy)
    return rows


@dataclass(frozen=True)
class PeopleOptions:
    """What one people benchmark measures."""

    library: Path  # the library whose people are scored
    label_sets: tuple[Path, ...]  # labelled CSVs (path,identity[,appearance_state]) naming its files
    sweep: tuple[float, ...] = ()  # identity thresholds to group copies at, from no people (empty: the library's own people)


@dataclass
class PeopleRun:
    """The results of one people benchmark: one row per threshold swept, or one row for the library's people."""

    options: PeopleOptions
    rows: list[dict]  # {"people", "tracks", "all", "photo", "video"[, "identity_threshold"]}


def bench_people(options: PeopleOptions) -> PeopleRun:
    """Score the library's people (grouped first, as `index` does) or, with a sweep, copies grouped at each threshold."""
    sets = list(options.label_sets)
    if options.sweep:
        return PeopleRun(options, sweep(options.library, sets, list(options.sweep)))
    library = Library.open(options.library)
    update_people(library)
    return PeopleRun(options, [people_accuracy(library, sets)])


def people_text(run: PeopleRun) -> str:
    """One line per row of a people run: its people, then pairwise precision, recall, F1 per part."""
    lines = []
    for r in run.rows:
        head = f"threshold {r['identity_threshold']:.3f}  " if "identity_threshold" in r else ""
        inbox = (f" ({r['unlisted_people']} more of too few tracks unlisted, {r['single_track_people_unlisted']} of them single-track; "
                 f"{r['inbox_tracks']} of {r['all_tracks']} tracks in the inbox, {r['labelled_in_inbox']} labelled ones counted as "
                 f"persons of their own)") if "inbox_tracks" in r else ""
        lines.append(f"{head}{r['people']} people{inbox}; " + "; ".join(
            f"{part}: {r[part]['tracks']} tracks of {r[part]['identities']} identities in {r[part]['clusters']} people, "
            f"precision {r[part]['precision']:.3f} recall {r[part]['recall']:.3f} F1 {r[part]['f1']:.3f}" for part in PEOPLE_PARTS))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sets", nargs="+", type=Path, help="labelled CSVs (path,identity[,appearance_state])")
    parser.add_argument("--library", type=Path, required=True)
    parser.add_argument("--sweep", default=None, help="comma-separated identity thresholds to try on copies")
    args = parser.parse_args()
    sweep_values = tuple(float(x) for x in args.sweep.split(",")) if args.sweep else ()
    run = bench_people(PeopleOptions(args.library, tuple(args.sets), sweep_values))
    print(json_text(run.rows))
    print(people_text(run))


if __name__ == "__main__":
    main()

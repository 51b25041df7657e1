"""Measure issue 16's acceptance on a library of all of ../shared/data, through the real CLI.

    python research/whole_head_acceptance.py --data ../shared/data --library /tmp/all-lib [--model default] [--json out.json]

Indexes every file under --data into --library (incremental: a rerun reuses it), then:
- `query alex-lacamoire.png --videos-only -k 3`: its hits (the issue asks for one inside 1.519-3.588 s);
- each face-api.js photo (people found in no video) with `--videos-only`: how many get "no confident match";
- each labelled photo of LABELS.csv and more/LABELS.csv (one person each) with the default `-k 5`: hits labelled the
  same person (same_look or other_look) that lie in a file labelled as somebody else; counted over all the photos;
- `people --json`: the number of looks of each labelled person of more/LABELS.csv who has several appearance states.
Prints one JSON object (and writes it to --json).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from headsearch.evaluation.labels import read_label_set
from schemas.records import MediaKind

ALEX_SHOT = (1.519, 3.588)  # the hamilton clip's second shot, on the file's timeline


def headsearch(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *map(str, args)], capture_output=True, text=True)


FAILED: list[str] = []  # queries that gave an error line (e.g. a photo without a head), reported


def query(library: Path, photo: Path, *extra: str) -> list[dict]:
    result = headsearch("query", photo, "--library", library, "--json", "--no-pictures", *extra)
    if result.returncode != 0:
        FAILED.append(result.stderr.strip().splitlines()[-1] if result.stderr.strip() else f"{photo}: exit {result.returncode}")
        return []
    return json.loads(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--library", type=Path, required=True)
    parser.add_argument("--model", default=None, help="index with this model (a new library only)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    data = args.data.resolve()
    out: dict = {}

    t0 = time.perf_counter()
    index = headsearch("index", data, "--library", args.library, "-q", *(["--model", args.model] if args.model else []))
    out["index"] = {"exit": index.returncode, "line": index.stdout.strip().splitlines()[-1] if index.stdout.strip() else index.stderr.strip(),
                    "seconds": round(time.perf_counter() - t0, 1)}
    stats = json.loads(headsearch("stats", "--library", args.library, "--json").stdout)
    out["library"] = {"model": stats["model"]["name"], "files": stats["videos"], "tracks": stats["tracks"]}
    verbose = headsearch("-v", "query", data / "face_recognition/examples/alex-lacamoire.png", "--library", args.library, "--no-pictures")
    out["thresholds"] = [line.split(": ", 1)[1] for line in verbose.stderr.splitlines() if line.startswith("headsearch.search.service: thresholds")]

    alex = query(args.library, data / "face_recognition/examples/alex-lacamoire.png", "--videos-only", "-k", "3")
    out["alex"] = {"hits": [{k: h[k] for k in ("video", "start", "end", "tier", "id_score", "head_score", "appearance_score")} for h in alex],
                   "in_second_shot": any(h["video"].endswith("short_hamilton_clip.mp4") and h["start"] >= ALEX_SHOT[0] - 1e-3
                                         and h["end"] <= ALEX_SHOT[1] + 1e-3 for h in alex)}

    strangers = sorted((data / "face-api.js/examples/images").glob("*/*.png"))
    confident = {str(p.relative_to(data)): len(query(args.library, p, "--videos-only")) for p in strangers}
    out["face_api_strangers"] = {"photos": len(strangers), "no_confident_match": sum(n == 0 for n in confident.values()),
                                 "with_hits": {p: n for p, n in confident.items() if n}}

    identity_of: dict[str, str] = {}
    looks_of: dict[str, set] = defaultdict(set)
    photos = []
    for csv in (data / "LABELS.csv", data / "more" / "LABELS.csv"):
        labels = read_label_set(csv)
        for f in labels.files:
            identity_of[str(f.path)] = f.identity
            if csv.parent.name == "more":
                looks_of[f.identity].add(f.state)
            if f.kind == MediaKind.IMAGE:
                photos.append(f)
    wrong = []
    for f in photos:
        for h in query(args.library, f.path):
            other = identity_of.get(h["video"])
            if h["tier"] in ("same_look", "other_look") and other is not None and other != f.identity:
                wrong.append({"query": str(f.path.relative_to(data)), "hit": str(Path(h["video"]).relative_to(data)), "tier": h["tier"],
                              "query_person": f.identity, "hit_person": other, "id_score": h["id_score"], "head_score": h["head_score"],
                              "appearance_score": h["appearance_score"]})
    out["labelled_photo_queries"] = {"photos": len(photos), "other_person_called_same_person": len(wrong),
                                     "queries_with_one": len({w["query"] for w in wrong}), "cases": wrong}

    people = json.loads(headsearch("people", "--library", args.library, "--json").stdout)
    several = {who for who, states in looks_of.items() if len(states) > 1}
    by_person = defaultdict(list)
    for p in people:
        names = {identity_of.get(v) for v in p["videos"] + p.get("photos", [])} - {None}  # photos are listed apart
        if len(names) == 1:
            by_person[names.pop()].append(len(p["looks"]))
    out["people_looks"] = {who: by_person.get(who, []) for who in sorted(several)}
    out["failed_queries"] = FAILED
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

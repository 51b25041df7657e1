"""What the joins within a shot cost an analysis: the seconds spent keeping bodies (`_Analysis.keep_body`, every detected
sighting) and joining (`_join_within_shots`: the cues, the Lite0 bodies of the tracks a join may compare, the rule),
against the whole `analyse_file` of each video, in the same process (a share that holds on a loaded machine, where wall
times between runs do not).

    PYTHONPATH=. python research/rejoin_cost.py VIDEO ...
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import indexer.analysis as analysis
from headsearch.basics.settings import IndexSettings
from headsearch.detection.faces import FaceDetector
from headsearch.models import load_embedder

SPENT = {"keep_body": 0.0, "join": 0.0}


def _timed(name: str, fn):
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            SPENT[name] += time.perf_counter() - t0
    return wrapper


def main() -> int:
    analysis._Analysis.keep_body = _timed("keep_body", analysis._Analysis.keep_body)
    analysis._join_within_shots = _timed("join", analysis._join_within_shots)
    settings = IndexSettings.from_env()
    detector = FaceDetector.from_settings(settings)
    embedder = load_embedder(None)
    for video in sys.argv[1:]:
        SPENT.update(keep_body=0.0, join=0.0)
        t0 = time.perf_counter()
        result = analysis.analyse_file(Path(video), settings, detector, embedder)
        total = time.perf_counter() - t0
        joined = sum(tr.join is not None for tr in result.tracks)
        added = SPENT["keep_body"] + SPENT["join"]
        print(f"{Path(video).name}: analysis {total:.2f} s, {len(result.tracks)} tracks, {joined} joined; keeping bodies "
              f"{SPENT['keep_body']:.3f} s, joining {SPENT['join']:.3f} s: {100 * added / total:.2f}% of the analysis")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The bars of the joins within a shot (`indexer.rejoin.JoinBars`), measured on public videos of ../shared/data.

Pairs whose answer is known without labels:
- different people: two tracks of one shot on screen at the same time (their head cue, face-face or with a faceless
  side, and their bodies);
- the same person across a gap: one track cut in two halves at its middle sighting (the head cue of the halves, the
  body at its first and last sightings);
- the same person across a turn: one track's embedded sightings with a face against its sightings without one (the
  appearance cue of a faceless side).
The bars are chosen above the highest different-people score of each cue (rounded up to 0.05), and the share of
same-person pairs they keep is printed. Then every real candidate pair of the videos (one track ended before the other
began, in one shot) is listed with its scores and the join the rule makes, for checking by eye against the
thumbnails (`--sheets DIR` writes each video's tracks' thumbnails, named by index).

    PYTHONPATH=. python research/rejoin_bars.py [VIDEO ...] [--sheets DIR]
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from headsearch.basics.settings import IndexSettings
from headsearch.detection.faces import FaceDetector
from headsearch.models import load_embedder
from indexer.analysis import analyse_file
from indexer.rejoin import DEFAULT_BARS, PieceCues, body_cue, head_cue, join_pieces, piece_cues
from schemas.records import HeadTrack

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
VIDEOS = ("face_recognition/examples/short_hamilton_clip.mp4", "facenet-pytorch/examples/video.mp4",
          "LivePortrait/assets/examples/driving/d3.mp4", "more/LivePortrait/assets/examples/driving/d0.mp4",
          "more/LivePortrait/assets/examples/driving/d6.mp4", "LivePortrait/assets/examples/driving/d10.mp4",
          "PySceneDetect/tests/resources/goldeneye-vfr-drop3.mp4", "more/SadTalker/examples/ref_video/WDA_KatieHill_000.mp4")


def _cues(pieces: list[PieceCues], a: int, b: int) -> tuple[str, float | None, float | None]:
    cue = head_cue([pieces[a]], pieces[b], DEFAULT_BARS)
    kind = "face" if pieces[a].head is not None and pieces[b].head is not None else "look"
    return kind, None if cue is None else cue.score, body_cue(pieces[a], pieces[b])


def _pair(out: dict[str, list], sign: str, p: PieceCues, q: PieceCues) -> None:
    """The head cue of both sides with a face, and the appearance cue of any two sides (what a faceless side is
    compared on)."""
    if p.head is not None and q.head is not None:
        out[f"{sign}_face"].append(float(p.head @ q.head))
    if p.look is not None and q.look is not None:
        out[f"{sign}_look"].append(float(p.look @ q.look))


def _joint(out: dict[str, list], sign: str, p: PieceCues, q: PieceCues, body: float | None) -> None:
    """Whether the pair passes the bars of the rule (head or appearance cue, body where both have one), the ratio test
    aside: (passes, with a body)."""
    cue = head_cue([p], q, DEFAULT_BARS)
    if cue is None:
        return
    passes = cue.score >= cue.bar and (body >= DEFAULT_BARS.body if body is not None else not cue.faceless)
    out.setdefault(f"{sign}_joint", []).append((passes, body is not None))


def _half(track: HeadTrack, part: slice) -> HeadTrack:
    return replace(track, observations=track.observations[part])


def measure(path: Path, settings: IndexSettings, detector: FaceDetector, embedder, sheets: Path | None) -> dict[str, list]:
    cues: list[PieceCues] = []
    t0 = time.perf_counter()
    result = analyse_file(path, settings, detector, embedder, join_bars=None, join_cues=cues)
    print(f"\n== {path.relative_to(DATA) if path.is_relative_to(DATA) else path}: {len(result.tracks)} tracks, {len(result.shots)} shots, {time.perf_counter() - t0:.0f} s")
    out: dict[str, list] = {"neg_face": [], "neg_look": [], "neg_body": [], "pos_face": [], "pos_look": [], "pos_body": [],
                            "turn_look": []}
    _different_people(cues, out)
    for tr, cue in zip(result.tracks, cues, strict=True):
        _same_person(tr, cue, embedder.spec.appearance_dims, out)
    _candidates(cues)
    if sheets is not None:
        folder = sheets / path.stem
        folder.mkdir(parents=True, exist_ok=True)
        for i, tr in enumerate(result.tracks):
            if tr.thumbnail:
                (folder / f"{i:03d}_{tr.start:.1f}-{tr.end:.1f}_face{int(cues[i].face)}.jpg").write_bytes(tr.thumbnail)
    return out


def _different_people(cues: list[PieceCues], out: dict[str, list]) -> None:
    """Two tracks of one shot on screen at once."""
    for a, p in enumerate(cues):
        for q in cues[a + 1:]:
            if p.shot != q.shot or p.end < q.start or q.end < p.start:
                continue
            _pair(out, "neg", p, q)
            for x, y in ((p.body_first, q.body_first), (p.body_last, q.body_last)):
                if x is not None and y is not None:
                    out["neg_body"].append(float(x @ y))
            body = None if p.body_last is None or q.body_first is None else float(p.body_last @ q.body_first)
            _joint(out, "neg", p, q, body)


def _same_person(tr: HeadTrack, cue: PieceCues, dims: int, out: dict[str, list]) -> None:
    """A track's halves; its body at both ends (a second apart at least); its sightings with a face against those without."""
    embedded = [k for k, o in enumerate(tr.observations) if o.embeddings]
    if len(embedded) >= 2:
        mid = embedded[len(embedded) // 2]
        first, second = piece_cues(_half(tr, slice(0, mid)), dims), piece_cues(_half(tr, slice(mid, None)), dims)
        _pair(out, "pos", first, second)
        body = None if cue.body_first is None or cue.body_last is None else float(cue.body_first @ cue.body_last)
        _joint(out, "pos", first, second, body)
    if cue.body_first is not None and cue.body_last is not None and tr.observations[-1].time - tr.start >= 1.0:
        out["pos_body"].append(float(cue.body_first @ cue.body_last))
    faced = [o for o in tr.observations if o.embeddings and o.face is not None]
    faceless = [o for o in tr.observations if o.embeddings and o.face is None]
    if faced and faceless:
        x, y = piece_cues(replace(tr, observations=faced), dims), piece_cues(replace(tr, observations=faceless), dims)
        if x.look is not None and y.look is not None:
            out["turn_look"].append(float(x.look @ y.look))


def _candidates(cues: list[PieceCues]) -> None:
    """Every real candidate pair with its cues and the join the rule makes, for checking by eye."""
    joins = join_pieces(cues, DEFAULT_BARS)
    for b, q in enumerate(cues):
        for a, p in enumerate(cues):
            if a == b or p.shot != q.shot or p.end >= q.start or not (p.face or q.face):
                continue
            kind, head, body = _cues(cues, a, b)
            j = joins[b]
            print(f"  candidate {a:3d} [{p.start:6.2f}-{p.end:6.2f} face={p.face:d}] -> {b:3d} [{q.start:6.2f}-{q.end:6.2f} face={q.face:d}] "
                  f"shot {q.shot}: {kind} {'-' if head is None else f'{head:.3f}'} body {'-' if body is None else f'{body:.3f}'} "
                  f"size x{max(p.last_height, q.first_height) / max(1.0, min(p.last_height, q.first_height)):.2f}"
                  f"{'  JOINED to ' + str(j.to) + ' by ' + j.cue if j is not None else ''}")


def _bar(negatives: list[float]) -> float:
    return math.ceil((max(negatives) if negatives else 0.0) * 20 + 1e-9) / 20


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("videos", nargs="*")
    ap.add_argument("--sheets", type=Path)
    args = ap.parse_args()
    settings = IndexSettings.from_env()
    detector = FaceDetector.from_settings(settings)
    embedder = load_embedder(None)
    total: dict[str, list] = {}
    for v in args.videos or [str(DATA / p) for p in VIDEOS]:
        for k, xs in measure(Path(v), settings, detector, embedder, args.sheets).items():
            total.setdefault(k, []).extend(xs)
    print("\n== scores (different people: on screen at once; same person: a track's halves, its face vs faceless sightings)")
    for k, xs in sorted((k, xs) for k, xs in total.items() if not k.endswith("_joint")):
        a = np.array(xs)
        print(f"{k:10s} n={len(a):4d}" + (f" min {a.min():.3f} p05 {np.percentile(a, 5):.3f} median {np.median(a):.3f} "
                                          f"p95 {np.percentile(a, 95):.3f} max {a.max():.3f}" if len(a) else ""))
    for cue, neg, pos in (("head", "neg_face", "pos_face"), ("appearance", "neg_look", "pos_look"), ("body", "neg_body", "pos_body")):
        bar = _bar(total[neg])
        kept = np.mean(np.array(total[pos]) >= bar) if total[pos] else float("nan")
        print(f"{cue}: above every different-people pair at {bar:.2f}; same-person pairs kept {kept:.3f}")
    for sign, what in (("neg", "different people on screen at once"), ("pos", "halves of one track")):
        pairs = total.get(f"{sign}_joint", [])
        print(f"at the shipped bars {DEFAULT_BARS}: {sum(p for p, _ in pairs)} of {len(pairs)} pairs of {what} pass "
              f"({sum(p for p, b in pairs if b)} of {sum(b for _, b in pairs)} with a body on both sides)")
    bar = _bar(total["neg_look"])
    print(f"appearance across a turn at {bar:.2f}: kept {np.mean(np.array(total['turn_look']) >= bar) if total['turn_look'] else float('nan'):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

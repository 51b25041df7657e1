"""What a query shows: the scope of the search, confident-only hits, each hit's sighting (kind, box,
face, shot), and the one JSON rendering of hits that the CLI and the web app share.

The ranking itself is the query engine's (`headsearch.search.engine`); this module asks it for more
tracks until enough of them fall inside the scope and above the confidence bar. The road from a photo
to these is `headsearch.search.service`.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from headsearch.basics.errors import HeadsearchError
from headsearch.basics.media import fingerprint, fingerprint_bytes
from headsearch.basics.text import printable
from headsearch.basics.timeline import format_time
from headsearch.embedding.photo_heads import QueryHead
from headsearch.evaluation.thresholds import Thresholds
from headsearch.search.engine import QueryEngine
from headsearch.store.library import Library
from headsearch.store.rows import Sighting
from schemas.records import SCORE_DIGITS, Box, MediaKind, SearchHit, Tier, VectorKind, join_words

if TYPE_CHECKING:
    from headsearch.exports.timelines import Moment

log = logging.getLogger(__name__)


# ----- scope and confidence --------------------------------------------------------------------
@dataclass(frozen=True)
class Scope:
    """Which indexed files a query may answer with."""

    videos_only: bool = False
    photos_only: bool = False
    under: tuple[Path, ...] = ()  # only files under these folders (or these files)
    exclude: frozenset[str] = frozenset()  # never these paths (the query photo itself)

    def __post_init__(self) -> None:
        if self.videos_only and self.photos_only:
            raise HeadsearchError("--videos-only and --photos-only exclude each other")

    def admits(self, path: str, kind: MediaKind | str | None) -> bool:
        if path in self.exclude:
            return False
        if self.videos_only and kind != MediaKind.VIDEO:
            return False
        if self.photos_only and kind != MediaKind.IMAGE:
            return False
        return not self.under or any(Path(path) == u or Path(path).is_relative_to(u) for u in self.under)

    def with_query_file(self, library: Library, query: Path) -> Scope:
        """The same scope without the query file itself (any indexed file with its content fingerprint)."""
        try:
            digest = fingerprint(Path(query), Path(query).stat().st_size)
        except OSError:
            digest = None
        return self._without(library, {str(Path(query).expanduser().resolve())}, digest)

    def with_query_bytes(self, library: Library, data: bytes) -> Scope:
        """The same scope without any indexed file of this content (an uploaded query photo)."""
        return self._without(library, set(), fingerprint_bytes(data))

    def _without(self, library: Library, paths: set[str], digest: str | None) -> Scope:
        if digest is not None:
            with library.reading() as reader:
                paths |= reader.paths_with_fingerprint(digest)
        return Scope(self.videos_only, self.photos_only, self.under, frozenset(self.exclude | paths))


@dataclass(frozen=True)
class Confidence:
    """Which hits are shown: those the calibrated thresholds call the same person (their tier), those whose
    identity score is at least --min-score, or all of them (uncalibrated, or --show-weak)."""

    bar: float | None = None  # the identity threshold, or --min-score
    inclusive: bool = False  # --min-score X shows X itself; a calibrated threshold accepts strictly above
    show_weak: bool = False  # show the hits below the bar too, marked
    source: str = ""  # what the bar is, for messages

    @property
    def calibrated(self) -> bool:
        return self.bar is not None

    def confident(self, hit: SearchHit) -> bool | None:
        if self.bar is None:
            return None
        if self.inclusive:  # --min-score X keeps a hit whose score is X in JSON: it compares the score as --json shows it.
            return round(hit.identity_score, SCORE_DIGITS) >= self.bar
        if hit.tier is not None:  # the thresholds' verdict: by the face, or by the look of the head alone
            return hit.tier != Tier.OTHER_PERSON
        return hit.identity_score > self.bar

    def shows(self, hit: SearchHit) -> bool:
        return self.show_weak or self.confident(hit) is not False


def confidence_for(thresholds: Thresholds | None, min_score: float | None = None, show_weak: bool = False) -> Confidence:
    """The confidence bar of a query: --min-score, else the identity threshold, else none."""
    if min_score is not None:
        return Confidence(float(min_score), True, show_weak, f"--min-score {min_score:g}")
    if thresholds is not None:
        return Confidence(thresholds.identity, False, show_weak, f"identity threshold {thresholds.identity:.3f} (FAR {thresholds.far:.2g})")
    return Confidence(None, False, True, "")


def without_face(confidence: Confidence, thresholds: Thresholds | None) -> Confidence:
    """The bar of a query head without a face: the look of the head alone, against the appearance bar
    (unless the user set --min-score, or there are no such thresholds)."""
    if confidence.inclusive or thresholds is None or thresholds.appearance is None:
        return confidence
    return replace(confidence, bar=thresholds.appearance,
                   source=f"appearance threshold {thresholds.appearance:.3f} (the look of a head without a face)")


def older_model_note(library: Library) -> str | None:
    """The one line said when a library was made by a built-in model that is not the default any more (its answers
    are the older model's: an old `sface` or `dlib-resnet` library ranks people as those did); None otherwise."""
    from headsearch.models.registry import BUILTIN_MODULES, DEFAULT_MODEL, find_spec

    model = library.model
    spec = find_spec(model)
    built_in = spec is not None and getattr(spec.load, "__module__", None) in BUILTIN_MODULES  # not a user's file or plugin
    if not built_in or model.name == DEFAULT_MODEL or DEFAULT_MODEL in spec.registered_names:
        return None
    return (f"note: {library.root} was made by {model.name}, not by the default model ({DEFAULT_MODEL}): `headsearch reindex "
            f"--library {library.root}` re-embeds it with the default, keeping its people and corrections")


def uncalibrated_note(model_name: str) -> str:
    """The one line said when scores cannot be told right from wrong."""
    return (f"note: scores are uncalibrated (no thresholds for {model_name}): the best hits are shown whatever their score; "
            "`headsearch bench SET --calibrate 1e-3 --library DIR` makes thresholds")


# ----- hits ------------------------------------------------------------------------------------
@dataclass
class ShownHit:
    """A hit as shown: the engine's hit, where it was seen, whether it is confident, its picture and clip."""

    hit: SearchHit
    sighting: Sighting | None = None
    confident: bool | None = None  # None when uncalibrated
    picture: str | None = None  # the matched moment with the head boxed
    picture_note: str | None = None  # why the picture is the track's thumbnail instead
    clip: dict | None = None  # {"path", "start", "end", "method"} when exported
    look: int | None = None  # which of a person's looks the track is in (1: the most seen), for a person's moments


@dataclass
class HeadResult:
    """The answer for one head of the query photo."""

    head: QueryHead | None  # None for hits found another way (a person's moments, "more like this")
    hits: list[ShownHit] = field(default_factory=list)
    hidden_weak: int = 0  # hits below the bar not shown
    best_hidden: float | None = None
    confidence: Confidence | None = None  # the bar this head was held to, when not the query's (a head without a face)


def found_hits(library: Library, hits: Sequence[SearchHit], scope: Scope = Scope(), looks: Sequence[Sequence[int]] = ()) -> HeadResult:
    """Hits found another way (e.g. a person's moments, with the person's `looks`: track ids grouped by look)
    as one result, with their sightings, inside the scope."""
    with library.reading() as reader:
        sightings = reader.sightings([h.observation_id for h in hits if h.observation_id is not None])
    look_of = {tr: n for n, look in enumerate(looks, 1) for tr in look}
    shown = [ShownHit(h, sightings.get(h.observation_id), look=look_of.get(h.track_id))
             for h in hits if scope.admits(h.video, _kind(sightings, h))]
    return HeadResult(None, with_joined(library, shown))


def with_joined(library: Library, shown: list[ShownHit]) -> list[ShownHit]:
    """Each hit that is the person (confident, or uncalibrated) followed by the other tracks of its person in its shot,
    which the analysis joined to it (`indexer.rejoin`: a head that turned away, was hidden a moment): each with the hit's
    tier and scores (the person's), its own time range and sighting, `joined_to` the hit's track and the cue that joined
    them. A track of the person shown further down already keeps its place, tier and scores, and is marked joined."""
    anchors = [s.hit.track_id for s in shown if s.confident is not False and s.hit.joined_to is None]
    if not anchors:
        return shown
    with library.reading() as reader:
        pieces = reader.joined_pieces(anchors)
        if not pieces:
            return shown
        sightings = reader.sightings([p.observation_id for ps in pieces.values() for p in ps])
    marked = list(shown)
    place = {s.hit.track_id: i for i, s in enumerate(shown)}
    out: list[ShownHit] = []
    for i in range(len(marked)):
        s = marked[i]
        out.append(s)
        if s.confident is False or s.hit.joined_to is not None:
            continue
        for p in pieces.get(s.hit.track_id, []):
            j = place.get(p.track_id)
            if j is not None:
                if j > i and marked[j].hit.joined_to is None:
                    marked[j] = replace(marked[j], hit=replace(marked[j].hit, joined_to=s.hit.track_id, join_cue=p.cue))
                continue
            place[p.track_id] = -1
            hit = replace(s.hit, track_id=p.track_id, start=p.start, end=p.end, time=p.time,
                          thumbnail=str((library.root / p.thumbnail).resolve()),
                          observation_id=p.observation_id, yaw=None, joined_to=s.hit.track_id, join_cue=p.cue)
            out.append(ShownHit(hit, sightings.get(p.observation_id), s.confident, look=s.look))
    return out


def scoped_search_vectors(engine: QueryEngine, query: dict[VectorKind, object], k: int, scope: Scope = Scope(),
                          confidence: Confidence = Confidence()) -> HeadResult:
    library = engine.library
    with library.reading() as reader:
        total = reader.track_count()
    want = k + len(scope.exclude)
    while True:
        hits = engine.search_vectors(query, min(want, max(total, 1)))
        with library.reading() as reader:
            sightings = reader.sightings([h.observation_id for h in hits if h.observation_id is not None])
        admitted = [h for h in hits if scope.admits(h.video, _kind(sightings, h))]
        shown = [h for h in admitted if confidence.shows(h)]
        exhausted = len(hits) < want or want >= total
        # ranked hits are the same person first: once the last one is not, asking for more finds no more that are
        below = confidence.bar is not None and not confidence.show_weak and hits and confidence.confident(hits[-1]) is False
        if len(shown) >= k or exhausted or below:
            break
        want *= 4
    shown = shown[:k]
    weak = [h for h in admitted if not confidence.shows(h)]
    hits_shown = with_joined(library, [ShownHit(h, sightings.get(h.observation_id), confidence.confident(h)) for h in shown])
    result = HeadResult(None, hits_shown, len(weak), max((h.identity_score for h in weak), default=None))
    log.info("query: %d tracks looked at, %d in scope, %d shown, %d below the bar (%s)", len(hits), len(admitted), len(shown),
             len(weak), confidence.source or "uncalibrated")
    return result


def _kind(sightings: dict[int, Sighting], hit: SearchHit) -> MediaKind | None:
    s = sightings.get(hit.observation_id)
    return s.kind if s is not None else None


# ----- rendering -------------------------------------------------------------------------------
def _round_box(box: Sequence[float] | Box | None) -> list[float] | None:
    if box is None:
        return None
    values = box.as_tuple() if isinstance(box, Box) else box
    return [round(float(v), 1) for v in values]


def clipped_box(box: Sequence[float] | Box | None, size: tuple[int, int] | None) -> tuple[list[float] | None, list[float] | None]:
    """A head box within its image (width, height), and the box as stored where it reaches outside the image (a head
    at the edge: its box frames the whole head, part of which the image does not show), else None."""
    whole = _round_box(box)
    if whole is None or not size or not size[0] or not size[1]:
        return whole, None
    w, h = size
    inside = [round(min(max(whole[0], 0.0), w), 1), round(min(max(whole[1], 0.0), h), 1), round(min(max(whole[2], 0.0), w), 1),
              round(min(max(whole[3], 0.0), h), 1)]
    return inside, (whole if inside != whole else None)


def hit_json(shown: ShownHit) -> dict:
    """One hit as JSON: the engine's fields (seconds on the file's timeline) and where it was seen."""
    d = shown.hit.to_dict()
    s = shown.sighting
    is_photo = s is not None and s.kind == MediaKind.IMAGE
    box, unclipped = clipped_box(s.box, s.source_size) if s is not None else (None, None)
    d.update({
        "kind": None if s is None else str(s.kind),
        "box": box,  # the head at the matched time, in the file's pixels, within the picture
        "face_visible": None if s is None else s.face_visible,
        "found_by": None if s is None else s.found_by,  # how the head was found: face, keypoints, followed
        "shot": None if s is None or is_photo else {"index": s.shot_index, "start": round(s.shot_start, 3), "end": round(s.shot_end, 3)},
        "confident": shown.confident,
        "picture": shown.picture,
    })
    if unclipped is not None:
        d["box_unclipped"] = unclipped  # the whole head's box, reaching outside the picture
    if shown.clip is not None:
        d["clip"] = shown.clip
    if shown.look is not None:
        d["look"] = shown.look
    return d


def _group_json(hits: list[ShownHit]) -> list[dict]:
    groups: dict[str, list[ShownHit]] = {}
    for h in hits:
        groups.setdefault(h.hit.video, []).append(h)
    return [{"video": video, "kind": None if hs[0].sighting is None else str(hs[0].sighting.kind),
             "best_score": round(max(h.hit.score for h in hs), SCORE_DIGITS), "hits": [hit_json(h) for h in hs]} for video, hs in groups.items()]


def results_json(results: list[HeadResult], all_heads: bool = False, per_video: bool = False) -> list:
    """The JSON of a query (the one rendering shared by the CLI and the web app): a list of hits;
    with `per_video`, a list of videos each with its hits; with `all_heads`, a list of the photo's
    heads, each with its number, box and hits."""
    def body(r: HeadResult) -> list:
        return _group_json(r.hits) if per_video else [hit_json(h) for h in r.hits]

    if not all_heads:
        return body(results[0]) if results else []
    out = []
    for n, r in enumerate(results, 1):
        box, unclipped = clipped_box(r.head.box, r.head.image_size) if r.head else (None, None)
        out.append({"head": r.head.number if r.head else n, "box": box, "face_visible": r.head.face_visible if r.head else None,
                    **({"box_unclipped": unclipped} if unclipped is not None else {}), "hits": body(r)})
    return out


def _time_range(shown: ShownHit) -> str:
    h = shown.hit
    if shown.sighting is not None and shown.sighting.kind == MediaKind.IMAGE:
        return f"{'photo':<29}"
    return f"{format_time(h.start)}-{format_time(h.end)} at {format_time(h.time)}"


def hit_line(rank: int, shown: ShownHit, indent: str = "") -> str:
    h = shown.hit
    tier = f"  {h.tier}" if h.tier else ""
    weak = "  (below the confidence bar)" if shown.confident is False else ""
    weak += "  (matched without a face)" if h.matched_without_face else ""
    weak += f"  look {shown.look}" if shown.look is not None else ""
    weak += f"  ({join_words(h.join_cue)}: track {h.joined_to})" if h.joined_to is not None else ""
    picture = shown.picture or h.thumbnail
    return f"{indent}{rank:>2}. {h.score:.3f}  {_time_range(shown)}  {printable(h.video)}  [{printable(picture)}]{tier}{weak}"


def clip_line(shown: ShownHit, indent: str = "") -> str | None:
    import shlex

    c = shown.clip
    if c is None:
        return None
    if c.get("path") is None:
        return f"{indent}    no clip: {c.get('error', 'not exported')}"
    return (f"{indent}    clip {c['path']} ({format_time(c['start'])}-{format_time(c['end'])} of the video, {c['method']})"
            f"  play: mpv {shlex.quote(c['path'])}")


def results_text(results: list[HeadResult], confidence: Confidence, all_heads: bool = False, per_video: bool = False) -> list[str]:
    """The text of a query: one line a hit (times as h:mm:ss.mmm), grouped per video or per head on request."""
    lines: list[str] = []
    for r in results:
        indent = ""
        if all_heads and r.head is not None:
            b, _ = clipped_box(r.head.box, r.head.image_size)
            lines.append(f"head {r.head.number} at x {b[0]:.0f}-{b[2]:.0f}, y {b[1]:.0f}-{b[3]:.0f}"
                         f"{'' if r.head.face_visible else ' (no face)'}:")
            indent = "  "
        if not r.hits:
            lines.append(indent + no_match_line(r, confidence))
            continue
        if per_video:
            groups: dict[str, list[ShownHit]] = {}
            for h in r.hits:
                groups.setdefault(h.hit.video, []).append(h)
            for video, hs in groups.items():
                lines.append(f"{indent}{printable(video)}  ({len(hs)} hit{'s' if len(hs) > 1 else ''}, best {max(h.hit.score for h in hs):.3f})")
                for rank, h in enumerate(hs, 1):
                    lines.append(hit_line(rank, h, indent + "  "))
                    lines.extend(x for x in [clip_line(h, indent + "  ")] if x)
        else:
            for rank, h in enumerate(r.hits, 1):
                lines.append(hit_line(rank, h, indent))
                lines.extend(x for x in [clip_line(h, indent)] if x)
        hidden = hidden_line(r, confidence)
        if hidden:
            lines.append(f"{indent}({hidden})")
    return lines


def hidden_line(result: HeadResult, confidence: Confidence, hint: str = "--show-weak lists them") -> str | None:
    """What was left out below the confidence bar, when something was."""
    confidence = result.confidence or confidence
    if not result.hidden_weak or confidence.show_weak:
        return None
    return f"{result.hidden_weak} more below the {confidence.source}, best {result.best_hidden:.3f}: {hint}"


def no_match_line(result: HeadResult, confidence: Confidence, hint: str = "--show-weak lists the closest") -> str:
    """The clear line said when nothing qualifies."""
    confidence = result.confidence or confidence
    if confidence.calibrated and result.best_hidden is not None:
        return (f"no confident match: the best score, {result.best_hidden:.3f}, is not above the {confidence.source} "
                f"({hint})")
    if confidence.calibrated:
        return "no confident match"
    return "no matches (nothing in the library, or nothing inside the scope)"


def export_moments(results: Sequence[HeadResult], names: Sequence[str]) -> tuple[list[Moment], int]:
    """The shown hits in videos as moments to export, each result's under its name (a query head, a person), in rank
    order; and how many hits in photos were left out (a photo has no time to put on a timeline)."""
    from headsearch.exports.timelines import Moment

    moments, photos = [], 0
    for result, name in zip(results, names, strict=True):
        for rank, s in enumerate(result.hits, 1):
            h = s.hit
            if s.sighting is not None and s.sighting.kind == MediaKind.IMAGE:
                photos += 1
                continue
            moments.append(Moment(h.video, h.start, h.end, name, None if h.tier is None else str(h.tier), h.score, h.track_id, rank,  # as --json's score
                                  join_words(h.join_cue)))
    return moments, photos


# ----- both on screen, or one without the other -----------------------------------------------------
def _merged(ranges: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _parts(start: float, end: float, others: list[tuple[float, float]], inside: bool) -> list[tuple[float, float]]:
    """[start, end] within the (merged, sorted) ranges (`inside`), or outside all of them. Ranges that only touch (one
    track ends on a cut where the other's begins) share no moment; two photos' instants (no duration) share theirs."""
    if inside:
        return [(lo, hi) for a, b in others for lo, hi in [(max(start, a), min(end, b))]
                if lo < hi or (start == end and a == b and lo == hi)]
    if start == end:  # a photo: a moment without a duration
        return [] if any(a <= start <= b for a, b in others) else [(start, end)]
    out, at = [], start
    for a, b in others:
        if b <= at or a >= end:
            continue
        if a > at:
            out.append((at, a))
        at = max(at, b)
    if at < end:
        out.append((at, end))
    return out


def together(found: HeadResult, other: HeadResult, without: bool = False) -> HeadResult:
    """The moments of `found` while the person of `other` is on screen in the same file too (tracks never cross a
    cut: the same shot, at the same time), or, `without`, while they are not. A hit becomes one hit per part of its
    time range that remains; its best time is kept where it falls inside, else the part's start."""
    ranges: dict[str, list[tuple[float, float]]] = {}
    for s in other.hits:
        ranges.setdefault(s.hit.video, []).append((s.hit.start, s.hit.end))
    ranges = {v: _merged(r) for v, r in ranges.items()}
    out = []
    for s in found.hits:
        h = s.hit
        for a, b in _parts(h.start, h.end, ranges.get(h.video, []), inside=not without):
            t = h.time if a <= h.time <= b else a
            out.append(ShownHit(replace(h, start=a, end=b, time=t), s.sighting, s.confident, look=s.look))
    return HeadResult(found.head, out, found.hidden_weak, found.best_hidden, found.confidence)

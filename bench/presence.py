"""Presence against a labelled set (`headsearch bench presence SET`): how much of the time each person's head is on
screen, whichever way it faces, a query with their photo finds, and `redact --ref` with the same photo hides.

The set (`bench/sets/presence.csv`) gives, per person, the frames their head is on screen (first and last frame,
inclusive, numbered as PyAV decodes the file from 0) with the view (front, profile, back), and one reference: a photo,
or a crop of one frame of a video (`reference` the video, `ref_time` seconds on its presentation timeline, `ref_box`
"x1 y1 x2 y2" in its pixels, empty: the whole frame). The set's videos are indexed into a library (a temporary one, or
the one named); then for each person:

- by query: the confident hits of `headsearch query PHOTO` (every track above the bar: k is not the limit) claim the
  frames whose presentation time lies in a hit's time range (from its track's start up to its end, as `query` shows it);
- by tracks: the tracks `redact --ref PHOTO` chooses in each video of the set (`actions.redact.Redactor`, through
  `headsearch.evaluation.track_scores`) claim the frames it would hide (its audit trail's first to last frame).

Coverage is the share of the person's on-screen frames claimed, by view; false coverage the claimed frames where the
person is not on screen (in any video); pieces the distinct tracks that claim some of the person's frames in each shot
(the library's shots) they are on screen in. "Turned in found shots": coverage of the profile and back frames in the
shots where the method claims some of the person's frames at all.

A run enters through `bench_presence(PresenceOptions(...))`, which returns a `PresenceRun` for `bench.report`.
"""
from __future__ import annotations

import csv
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from headsearch.basics.errors import HeadsearchError, NoHeadFound, cannot_read
from headsearch.basics.settings import IndexSettings

Report = Callable[[str], None]
VIEWS = ("front", "profile", "back")
TURNED = ("profile", "back")
COLUMNS = ("person", "file", "first_frame", "last_frame", "view", "reference", "ref_time", "ref_box", "centres")
ALL_TRACKS_K = 10_000  # a query's distinct tracks: more than any library of a set holds, so the bar alone decides
TIME_SLACK = 1e-3  # seconds: times are rounded to the millisecond


# ----- the set ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Interval:
    """Frames `first`..`last` (inclusive) of `file` where a person's head is on screen, facing `view`."""

    file: str
    first: int
    last: int
    view: str
    centres: tuple[tuple[int, float, float], ...] = ()  # (frame, x, y): where the head's centre is, in the file's pixels

    def centre_at(self, frame: int) -> tuple[float, float] | None:
        """The head's centre at `frame` (inside the interval): linear between the labelled frames, held before the
        first and after the last; None where the interval gives none."""
        if not self.centres or not self.first <= frame <= self.last:
            return None
        after = next((n for n, c in enumerate(self.centres) if c[0] >= frame), len(self.centres))
        if after == 0 or after == len(self.centres):
            c = self.centres[min(after, len(self.centres) - 1)]
            return c[1], c[2]
        (f0, x0, y0), (f1, x1, y1) = self.centres[after - 1], self.centres[after]
        w = (frame - f0) / (f1 - f0)
        return x0 + w * (x1 - x0), y0 + w * (y1 - y0)


@dataclass(frozen=True)
class Reference:
    """What a person is searched with: a photo (`time` None), or the frame of a video at `time`, cropped to `box`."""

    path: str
    time: float | None = None
    box: tuple[int, int, int, int] | None = None

    def describe(self) -> str:
        if self.time is None:
            return self.path
        return f"{self.path} at {self.time:.3f} s" + ("" if self.box is None else " box " + " ".join(map(str, self.box)))


@dataclass
class LabelledPerson:
    name: str
    reference: Reference
    intervals: list[Interval] = field(default_factory=list)

    @property
    def files(self) -> list[str]:
        return list(dict.fromkeys(i.file for i in self.intervals))

    def on_screen(self) -> dict[str, dict[int, str]]:
        """file -> frame -> view."""
        return on_screen_frames(self.intervals)


def on_screen_frames(intervals: Iterable[Interval]) -> dict[str, dict[int, str]]:
    """Each file's on-screen frames with their view; `HeadsearchError` where two intervals of one person overlap."""
    out: dict[str, dict[int, str]] = {}
    for iv in intervals:
        frames = out.setdefault(iv.file, {})
        for f in range(iv.first, iv.last + 1):
            if f in frames:
                raise HeadsearchError(f"{iv.file}: frame {f} is in two intervals of one person")
            frames[f] = iv.view
    return out


def read_presence_set(path: Path) -> list[LabelledPerson]:
    """The people of a presence set, in the order of their first rows; one line (`HeadsearchError`) for what is wrong."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
            header = rows[0].keys() if rows else ()
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise cannot_read(path, e) from e
    missing = [c for c in COLUMNS[:-1] if c not in header]  # centres may be left out
    if not rows or missing:
        raise HeadsearchError(f"{path}: not a presence set: columns {','.join(COLUMNS[:-1])}[,{COLUMNS[-1]}] expected"
                              + (f" (missing: {', '.join(missing)})" if rows else " with rows"))
    people: dict[str, LabelledPerson] = {}
    for n, row in enumerate(rows, 2):
        name, file = (row["person"] or "").strip(), (row["file"] or "").strip()
        try:
            first, last = int(row["first_frame"]), int(row["last_frame"])
        except (TypeError, ValueError):
            raise HeadsearchError(f"{path}:{n}: first_frame and last_frame are whole frame numbers") from None
        view = (row["view"] or "").strip()
        if not name or not file or view not in VIEWS or not 0 <= first <= last:
            raise HeadsearchError(f"{path}:{n}: a person, a file, 0 <= first_frame <= last_frame and a view "
                                  f"({', '.join(VIEWS)}) are expected")
        reference = _reference(row, f"{path}:{n}")
        person = people.get(name)
        if person is None:
            if reference is None:
                raise HeadsearchError(f"{path}:{n}: {name}'s first row gives no reference (a photo, or a video with ref_time)")
            person = people[name] = LabelledPerson(name, reference)
        elif reference is not None and reference != person.reference:
            raise HeadsearchError(f"{path}:{n}: a second reference for {name}: give one per person")
        person.intervals.append(Interval(file, first, last, view, _centres(row.get("centres"), f"{path}:{n}")))
    for person in people.values():
        person.on_screen()  # overlapping intervals refused now
    return list(people.values())


def _centres(cell: str | None, where: str) -> tuple[tuple[int, float, float], ...]:
    """`frame:x y;frame:x y...` (frames increasing) as (frame, x, y)."""
    out = []
    for part in (cell or "").split(";"):
        if not part.strip():
            continue
        try:
            frame, xy = part.split(":")
            x, y = (float(v) for v in xy.split())
            out.append((int(frame), x, y))
        except ValueError:
            raise HeadsearchError(f"{where}: centres are frame:x y, separated by ';' (got {part.strip()!r})") from None
    if any(b[0] <= a[0] for a, b in zip(out, out[1:], strict=False)):
        raise HeadsearchError(f"{where}: the centres' frames must increase")
    return tuple(out)


def _reference(row: dict, where: str) -> Reference | None:
    ref = (row["reference"] or "").strip()
    at, box = (row["ref_time"] or "").strip(), (row["ref_box"] or "").strip()
    if not ref:
        if at or box:
            raise HeadsearchError(f"{where}: ref_time and ref_box need a reference")
        return None
    try:
        seconds = float(at) if at else None
        corners = tuple(int(v) for v in box.split()) if box else None
    except ValueError:
        raise HeadsearchError(f"{where}: ref_time is seconds, ref_box four whole pixels x1 y1 x2 y2") from None
    if corners is not None and (seconds is None or len(corners) != 4 or corners[0] >= corners[2] or corners[1] >= corners[3]):
        raise HeadsearchError(f"{where}: ref_box is x1 y1 x2 y2 (x1 < x2, y1 < y2) of the frame at ref_time")
    return Reference(ref, seconds, corners)  # type: ignore[arg-type]


# ----- the arithmetic --------------------------------------------------------------------------------
def frames_in_ranges(times: Sequence[float], ranges: Iterable[tuple[float, float]], slack: float = TIME_SLACK) -> set[int]:
    """The frames (indexes into `times`, their presentation times) inside any of the time ranges, each from its start up
    to its end: a track's range ends where the next sample would be, or where its shot ends (the next shot's first
    frame), so the frame at the end is not in it."""
    inside = set()
    for start, end in ranges:
        inside.update(i for i, t in enumerate(times) if start - slack <= t < end - slack)
    return inside


def shot_of(frame: int, shots: Sequence[tuple[int, int]]) -> int | None:
    """The index in `shots` (first and last frames) of the shot holding `frame`."""
    return next((n for n, (a, b) in enumerate(shots) if a <= frame <= b), None)


@dataclass
class Coverage:
    """One way of finding a person (query or tracks), measured against their on-screen frames."""

    on: dict[str, int]  # view -> on-screen frames
    covered: dict[str, int]  # view -> of which claimed
    claimed: int  # frames claimed, in every video
    false: int  # ...of which the person is not on screen
    pieces: list[int]  # per shot the person is on screen in: the distinct tracks claiming some of their frames there
    turned_in_found: tuple[int, int] = (0, 0)  # (covered, on) profile and back frames in the shots where any is claimed
    others: int = 0  # claiming tracks that are someone else's (where the person's head centre is labelled)

    def share(self, views: Sequence[str] = VIEWS) -> float | None:
        on = sum(self.on.get(v, 0) for v in views)
        return sum(self.covered.get(v, 0) for v in views) / on if on else None

    def to_dict(self) -> dict:
        found = [p for p in self.pieces if p]
        return {"on_screen": dict(self.on), "covered": dict(self.covered),
                "coverage": {v: _rounded(self.share((v,))) for v in VIEWS} | {"all": _rounded(self.share())},
                "claimed": self.claimed, "false": self.false, "others_tracks": self.others,
                "false_share": _rounded(self.false / self.claimed if self.claimed else None),
                "pieces": list(self.pieces), "shots_found": len(found), "shots_on_screen": len(self.pieces),
                "pieces_per_found_shot": _rounded(sum(found) / len(found) if found else None),
                "turned_in_found_shots": {"covered": self.turned_in_found[0], "on_screen": self.turned_in_found[1],
                                          "coverage": _rounded(self.turned_in_found[0] / self.turned_in_found[1]
                                                               if self.turned_in_found[1] else None)}}


def someone_else(intervals: Sequence[Interval], sightings: Sequence[tuple[int, tuple[float, float, float, float]]],
                 rivals: Sequence[Interval] = ()) -> bool:
    """Whether a track is another person's: it was sighted where the person's head centre is labelled (`centres`), and
    fewer than half of those sightings hold it: a sighting's head box (x1, y1, x2, y2, the file's pixels) holds the
    person's centre, and no other labelled person's (`rivals`: their intervals in the file) is nearer the box's centre
    (head boxes have margins: two heads side by side can both lie in one)."""
    held = seen = 0
    for frame, (x1, y1, x2, y2) in sightings:
        centre = next((c for iv in intervals if (c := iv.centre_at(frame)) is not None), None)
        if centre is None:
            continue
        seen += 1
        mid = ((x1 + x2) / 2, (y1 + y2) / 2)
        nearest = min([(_distance(mid, centre), 0)] + [(_distance(mid, c), 1) for iv in rivals if (c := iv.centre_at(frame)) is not None])
        held += x1 <= centre[0] <= x2 and y1 <= centre[1] <= y2 and nearest[1] == 0
    return seen > 0 and 2 * held < seen


def _distance(a: tuple[float, float], b: tuple[float, float]) -> float:
    return ((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2) ** 0.5


def measure(on: dict[str, dict[int, str]], claims: dict[str, dict[object, set[int]]],
            shots: dict[str, Sequence[tuple[int, int]]], others: dict[str, set] | None = None) -> Coverage:
    """A person's coverage: `on` (file -> frame -> view), `claims` (file -> track -> frames it claims), `shots`
    (file -> each shot's first and last frame), `others` (file -> the claiming tracks that are someone else's: every
    frame they claim is false, unless one of the person's own tracks claims it while they are on screen)."""
    views = {v: 0 for v in VIEWS}
    covered = dict(views)
    on_count = dict(views)
    claimed = false = 0
    pieces: list[int] = []
    turned = [0, 0]
    for file in sorted(set(on) | set(claims)):
        frames = on.get(file, {})
        every = claims.get(file, {})
        tracks = {k: v for k, v in every.items() if k not in (others or {}).get(file, ())}
        union = set().union(*tracks.values()) if tracks else set()
        claimed_here = set().union(*every.values()) if every else set()
        claimed += len(claimed_here)
        false += len(claimed_here - (union & frames.keys()))
        for f, view in frames.items():
            on_count[view] += 1
            covered[view] += f in union
        cuts = list(shots.get(file, ())) or [(min(frames, default=0), max(frames, default=0))]
        by_shot: dict[int, list[int]] = {}
        for f in frames:
            s = shot_of(f, cuts)
            by_shot.setdefault(-1 if s is None else s, []).append(f)
        for seen in by_shot.values():
            pieces_here = sum(1 for got in tracks.values() if got.intersection(seen))
            pieces.append(pieces_here)
            if pieces_here:
                turned_frames = [f for f in seen if frames[f] in TURNED]
                turned[0] += sum(f in union for f in turned_frames)
                turned[1] += len(turned_frames)
    strangers = sum(len(set(claims.get(f, {})) & set(ks)) for f, ks in (others or {}).items())
    return Coverage(on_count, covered, claimed, false, pieces, (turned[0], turned[1]), strangers)


def _rounded(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


# ----- the run ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PresenceOptions:
    set_csv: Path
    root: Path | None = None  # folder the set's paths start from (None: the CSV's folder)
    library: Path | None = None  # index into (and keep) this library; None: a temporary one
    model: str | None = None
    settings: IndexSettings = field(default_factory=IndexSettings)


@dataclass
class PersonResult:
    name: str
    files: list[str]
    reference: str
    query: Coverage
    tracks: Coverage
    notes: list[str] = field(default_factory=list)
    claims: dict[str, dict[str, list[tuple[int, int]]]] = field(default_factory=dict)  # method[_others] -> file -> claimed runs

    def to_dict(self) -> dict:
        return {"person": self.name, "files": self.files, "reference": self.reference, "notes": self.notes,
                "query": self.query.to_dict(), "tracks": self.tracks.to_dict()}


@dataclass
class PresenceRun:
    options: PresenceOptions
    people: list[PersonResult]
    on_screen: dict[str, dict[str, dict[int, str]]]  # person -> file -> frame -> view
    frame_counts: dict[str, int]  # file -> frames
    index_seconds: float
    measure_seconds: float
    library: str | None  # the library kept (None: a temporary one)
    notes: list[str] = field(default_factory=list)

    def total(self, method: str) -> Coverage:
        """Every person's frames pooled."""
        parts = [getattr(p, method) for p in self.people]
        return Coverage({v: sum(c.on[v] for c in parts) for v in VIEWS}, {v: sum(c.covered[v] for c in parts) for v in VIEWS},
                        sum(c.claimed for c in parts), sum(c.false for c in parts), [n for c in parts for n in c.pieces],
                        (sum(c.turned_in_found[0] for c in parts), sum(c.turned_in_found[1] for c in parts)),
                        sum(c.others for c in parts))

    def to_dict(self) -> dict:
        return {"set": str(self.options.set_csv), "people": len(self.people), "videos": len(self.frame_counts),
                "library": self.library, "index_seconds": round(self.index_seconds, 1),
                "measure_seconds": round(self.measure_seconds, 1), "notes": self.notes,
                "totals": {m: self.total(m).to_dict() for m in ("query", "tracks")},
                "per_person": [p.to_dict() for p in self.people]}


def bench_presence(options: PresenceOptions, progress: Report | None = None) -> PresenceRun:
    """Index the set's videos, then measure each person's query and tracks against their on-screen frames."""
    say = progress or (lambda line: None)
    people = read_presence_set(options.set_csv)
    root = options.root if options.root is not None else options.set_csv.parent
    files = list(dict.fromkeys(f for p in people for f in p.files))
    paths = {f: (root / f) for f in files}
    for path in paths.values():
        if not path.is_file():
            raise HeadsearchError(f"{path}: not found (the set's paths start from --root, here {root})")
    with tempfile.TemporaryDirectory(prefix="presence-") as tmp:
        library = options.library or Path(tmp) / "library"
        started = time.perf_counter()
        say(f"indexing {len(files)} videos into {library}")
        _index(library, list(paths.values()), options)
        indexed = time.perf_counter()
        run = _measure(people, paths, root, library, Path(tmp), options, say)
        run.index_seconds, run.measure_seconds = indexed - started, time.perf_counter() - indexed
        run.library = str(options.library) if options.library else None
    return run


def _index(library: Path, videos: list[Path], options: PresenceOptions) -> None:
    from headsearch.models import load_embedder
    from headsearch.store.layout import MANIFEST, existing_model
    from headsearch.store.library import Library
    from indexer.pipeline import Indexer

    existing = existing_model(library) if (library / MANIFEST).exists() and options.model is None else None
    embedder = load_embedder(options.model or (existing.source if existing else None))
    summary = Indexer(Library.create(library, embedder.describe()), embedder, options.settings, progress=False).run(
        videos, report=lambda line: None)
    if summary.failed:
        raise HeadsearchError(f"{library}: {summary.failed} of the set's videos could not be indexed ({summary.line()})")


def _measure(people: list[LabelledPerson], paths: dict[str, Path], root: Path, library: Path, tmp: Path,
             options: PresenceOptions, say: Report) -> PresenceRun:
    from actions.redact import Redactor
    from headsearch.search.service import QueryOptions, SearchService
    from headsearch.store.library import Library

    times = {f: frame_times(p) for f, p in paths.items()}
    by_path = {str(p.resolve()): f for f, p in paths.items()}
    redactor = Redactor.open(library, options.model, options.settings)
    heads = {f: redactor.heads(p) for f, p in paths.items()}
    notes = [f"{f}: the library counts {h.frames} frames, PyAV {len(times[f])}: the frame numbers may not agree"
             for f, h in heads.items() if h.frames != len(times[f])]
    shots = {f: [h.shots[s] for s in sorted(h.shots)] for f, h in heads.items()}
    sightings = {f: _sightings(h, paths[f]) for f, h in heads.items()}
    service = SearchService(Library.open(library))
    results = []
    for person in people:
        say(f"{person.name}: {person.reference.describe()}")
        photo = reference_photo(person.reference, root, tmp, person.name)
        notes_here: list[str] = []
        query_claims = _query_claims(service, photo, QueryOptions(k=ALL_TRACKS_K, pictures=False), times, by_path, notes_here)
        track_claims = _track_claims(redactor, heads, photo, notes_here)
        on = person.on_screen()
        query_others, track_others = (_others(person, people, query_claims, sightings),
                                      _others(person, people, track_claims, sightings))
        results.append(PersonResult(person.name, person.files, person.reference.describe(),
                                    measure(on, query_claims, shots, query_others), measure(on, track_claims, shots, track_others),
                                    notes_here, {"query": _runs_of(query_claims, query_others),
                                                 "tracks": _runs_of(track_claims, track_others),
                                                 "query_others": _runs_of(query_claims, query_others, theirs=False),
                                                 "tracks_others": _runs_of(track_claims, track_others, theirs=False)}))
    return PresenceRun(options, results, {p.name: p.on_screen() for p in people}, {f: len(t) for f, t in times.items()},
                       0.0, 0.0, None, notes)


def _query_claims(service, photo: Path, options, times: dict[str, list[float]], by_path: dict[str, str],
                  notes: list[str]) -> dict[str, dict[object, set[int]]]:
    from dataclasses import replace

    try:
        answer = service.search_photo(photo, options)
    except NoHeadFound:
        # As `query` says to do: a photo that is already a head crop (the back of a head) is searched whole.
        notes.append("query: no head found in the reference; searched as a head crop (--whole-image)")
        answer = service.search_photo(photo, replace(options, whole_image=True))
    claims: dict[str, dict[object, set[int]]] = {}
    for shown in answer.shown:
        hit = shown.hit
        if shown.confident is False:
            continue
        file = by_path.get(str(Path(hit.video).resolve()))
        if file is None:
            continue
        piece = hit.joined_to or hit.track_id  # tracks joined within a shot are one piece of the person
        claims.setdefault(file, {}).setdefault(piece, set()).update(frames_in_ranges(times[file], [(hit.start, hit.end)]))
    return claims


def _track_claims(redactor, heads: dict, photo: Path, notes: list[str]) -> dict[str, dict[object, set[int]]]:
    from actions.redact import Whom

    whom = Whom(photos=(photo,))
    try:
        targets = redactor.targets(whom)
    except (NoHeadFound, HeadsearchError) as e:
        notes.append(f"redact --ref refuses the reference: {e}")
        return {}
    claims: dict[str, dict[object, set[int]]] = {}
    for file, h in heads.items():
        for chosen in redactor.choose(h, whom, targets):
            d = chosen.to_dict(h)
            piece = chosen.track.joined_to or chosen.track.key  # tracks joined within a shot are one piece of the person
            claims.setdefault(file, {}).setdefault(piece, set()).update(range(d["first_frame"], d["last_frame"] + 1))
    return claims


def _sightings(heads, path: Path) -> dict[object, list[tuple[int, tuple[float, float, float, float]]]]:
    """Each track's sightings (frame, head box in the file's pixels) of a video's analysis (`VideoHeads`)."""
    from headsearch.basics.timeline import probe_video

    probe = probe_video(path)
    sx, sy = (probe.width / heads.size[0], probe.height / heads.size[1]) if probe is not None and all(heads.size) else (1.0, 1.0)
    return {t.key: [(f, (b.x1 * sx, b.y1 * sy, b.x2 * sx, b.y2 * sy)) for f, b in t.sightings] for t in heads.tracks}


def _others(person: LabelledPerson, people: Sequence[LabelledPerson], claims: dict[str, dict[object, set[int]]],
            sightings: dict[str, dict]) -> dict[str, set]:
    """The claiming tracks that are someone else's, by where the person's head is labelled (`someone_else`)."""
    out: dict[str, set] = {}
    for file, tracks in claims.items():
        intervals = [iv for iv in person.intervals if iv.file == file]
        rivals = [iv for p in people if p is not person for iv in p.intervals if iv.file == file]
        out[file] = {k for k in tracks if someone_else(intervals, sightings.get(file, {}).get(k, []), rivals)}
    return out


def _runs_of(claims: dict[str, dict[object, set[int]]], others: dict[str, set], theirs: bool = True) -> dict[str, list[tuple[int, int]]]:
    """Each file's frames claimed by the person's own tracks (`theirs`) or by someone else's, as (first, last) runs, for
    the picture."""
    out = {}
    for file, tracks in claims.items():
        kept = [frames for k, frames in tracks.items() if (k in others.get(file, ())) != theirs]
        if kept:
            out[file] = runs(set().union(*kept))
    return out


def runs(frames: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted frames as (first, last) runs of consecutive frames."""
    out: list[tuple[int, int]] = []
    for f in sorted(frames):
        if out and f == out[-1][1] + 1:
            out[-1] = (out[-1][0], f)
        else:
            out.append((f, f))
    return out


def frame_times(path: Path) -> list[float]:
    """Every frame's presentation time as PyAV decodes the file (frame numbers are indexes into it)."""
    import av

    from headsearch.basics.errors import MediaError
    from headsearch.basics.quiet import native_stderr_silenced

    try:
        with native_stderr_silenced(), av.open(str(path)) as container:
            stream = container.streams.video[0]
            return [float(fr.time) for fr in container.decode(stream) if fr.time is not None]
    except (av.error.FFmpegError, IndexError, ValueError, OSError) as e:
        raise MediaError(f"{path}: cannot decode", detail=str(e)) from e


def reference_photo(ref: Reference, root: Path, tmp: Path, name: str) -> Path:
    """The reference as a photo file: the photo itself, or the video's frame cut to its box, written into `tmp`."""
    path = root / ref.path
    if not path.is_file():
        raise HeadsearchError(f"{path}: {name}'s reference is not there (the set's paths start from --root, here {root})")
    if ref.time is None:
        return path
    import cv2

    from headsearch.basics.frames import frame_at

    rgb = frame_at(path, ref.time)
    if ref.box is not None:
        x1, y1, x2, y2 = ref.box
        rgb = rgb[max(0, y1):y2, max(0, x1):x2]
    out = tmp / (name.replace("/", "_") + ".png")
    cv2.imwrite(str(out), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    return out


def views_of(on: dict[str, dict[int, str]]) -> dict[str, list[tuple[int, int, str]]]:
    """Each file's on-screen frames as (first, last, view) runs, for the picture."""
    out = {}
    for file, frames in on.items():
        spans: list[tuple[int, int, str]] = []
        for f in sorted(frames):
            if spans and f == spans[-1][1] + 1 and frames[f] == spans[-1][2]:
                spans[-1] = (spans[-1][0], f, spans[-1][2])
            else:
                spans.append((f, f, frames[f]))
        out[file] = spans
    return out


"""Leaks on the presence set (`headsearch bench redact bench/sets/presence.csv`): for each person, the frames where
their head is on screen (the set's intervals, facing any way) and not hidden by `redact --ref THEIR_REFERENCE` (and by
`redact --person`, where the library has people).

The set's videos are indexed into a library (a temporary one, or the one named) as `bench presence` does; then each
person's videos are redacted with their reference (`actions.redact.Redactor.redact`, the library's analysis read as
`redact --ref PHOTO --library` reads it), and each of their on-screen frames is judged one of two ways:

- by the pixels, where the set gives the head's centre on that frame (`centres`: frames from the interval's first
  labelled centre to its last, linear in between): the head box of the analysis' track that holds the centre at the
  nearest sighted frame of the interval (any track's: the person's head, whoever the tracker took it for), at that
  frame (`head_box_at`), is hidden when the middle of it (`bench.redact.HEAD_CORE` of each side) has lost the
  source's detail in the output (`bench.redact.hidden`, the judge of `bench redact SET` on labelled head boxes);
- by the audit trail elsewhere (no centre there, no head box near it, or too little detail in the source to tell): the
  frame is hidden when the trail draws a box there for a track chosen for the person that is not someone else's
  (`bench.presence.someone_else`, by the labelled centres), and, where a centre is labelled on that frame, the box
  holds it.

A person's leak rate is their leaked frames over their on-screen frames; by view; pooled over the set.

Where the library has people (`index` groups new tracks into people, so a library the bench made has them), each person
is also redacted with `redact --person` for the library's person that holds their labelled frames (`library_person`:
most of their sighted on-screen frames in that person's tracks, on the labelled centre where there is one), judged the
same way, in a second table (`person` in the JSON; a labelled person whose frames are held by tracks in no person is not
measured, and said so).
"""
from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.presence import VIEWS, Interval, LabelledPerson, _index, _rounded, _sightings, read_presence_set, reference_photo, runs, someone_else
from bench.redact import HEAD_CORE, detail, hidden
from headsearch.basics.errors import HeadsearchError, NoHeadFound
from headsearch.basics.settings import IndexSettings
from schemas.records import Box

Report = Callable[[str], None]
PRESENCE_COLUMNS = ("person", "first_frame", "last_frame", "view")  # a set with these columns is a presence set
BAR = 0.02  # the bar: every person's leak rate at most this
Sighting = tuple[int, tuple[float, float, float, float]]  # (frame, head box x1 y1 x2 y2 in the file's pixels)


def is_presence_set(path: Path) -> bool:
    """Whether a CSV's header is a presence set's (person, first_frame, last_frame, view...), not a head set's."""
    try:
        with open(path, encoding="utf-8") as f:
            header = {c.strip() for c in f.readline().split(",")}
    except (OSError, UnicodeDecodeError):
        return False
    return all(c in header for c in PRESENCE_COLUMNS)


# ----- the judging, frame by frame -----------------------------------------------------------------------------
def pixel_span(iv: Interval) -> range:
    """The frames of an interval its centres place the head on: from the first labelled centre to the last."""
    return range(iv.centres[0][0], iv.centres[-1][0] + 1) if iv.centres else range(0)


def head_box_at(frame: int, centre: tuple[float, float], tracks: dict[object, list[Sighting]], within: range) -> Box | None:
    """The head box to judge at `frame`: the analysis' track whose sighting nearest `frame` in `within` holds `centre`
    (any track: the person's head, whoever the tracker took it for) gives it: its box at `frame` (linear between its
    sightings) where it is sighted around `frame` and that box holds the centre, else a box of its nearest sighting's
    size put on the centre (the centres are labelled by eye, 20-70 px off between labelled frames: the detector's box
    places the head better). None where no sighting of `within` holds the centre."""
    def holds(b: tuple[float, float, float, float]) -> bool:
        return b[0] <= centre[0] <= b[2] and b[1] <= centre[1] <= b[3]

    nearest = min(((abs(f - frame), n, key) for key, seen in tracks.items() for n, (f, b) in enumerate(seen)
                   if f in within and holds(b)), default=None, key=lambda c: c[:2])
    if nearest is None:
        return None
    seen = sorted(tracks[nearest[2]], key=lambda s: s[0])
    before = [s for s in seen if s[0] <= frame]
    after = [s for s in seen if s[0] >= frame]
    if before and after:
        (f0, a), (f1, b) = before[-1], after[0]
        w = (frame - f0) / (f1 - f0) if f1 > f0 else 0.0
        placed = tuple(x + w * (y - x) for x, y in zip(a, b, strict=True))
        if holds(placed):
            return Box(*placed)
    x1, y1, x2, y2 = tracks[nearest[2]][nearest[1]][1]
    w, h = x2 - x1, y2 - y1
    return Box(centre[0] - w / 2, centre[1] - h / 2, centre[0] + w / 2, centre[1] + h / 2)


def trail_boxes(audit: dict) -> dict[int, list[tuple[object, Box]]]:
    """A redaction's audit trail (its JSON) as frame -> the boxes drawn there, with their tracks."""
    return {f["frame"]: [(b.get("track"), Box(*b["box"])) for b in f.get("boxes", ())] for f in audit.get("frames", ())}


def hidden_by_trail(frame: int, drawn: dict[int, list[tuple[object, Box]]], theirs: set, centre: tuple[float, float] | None) -> bool:
    """Whether the trail hides the person on `frame`: a box of one of their tracks (`theirs`) drawn there, holding their
    head's centre where it is labelled."""
    return any(track in theirs and (centre is None or box.x1 <= centre[0] <= box.x2 and box.y1 <= centre[1] <= box.y2)
               for track, box in drawn.get(frame, ()))


@dataclass
class FrameVerdict:
    leaked: bool
    by: str  # "pixels" or "trail"


def judge_file(intervals: Sequence[Interval], drawn: dict[int, list[tuple[object, Box]]], theirs: set,
               pixels: dict[int, bool | None]) -> dict[int, tuple[str, FrameVerdict]]:
    """Each on-screen frame of one person in one file: its view and verdict. `pixels`: frame -> the pixels' verdict
    (hidden, or None where the source has too little detail to tell) where a head box was judged; the trail elsewhere."""
    out = {}
    for iv in intervals:
        span = pixel_span(iv)
        for f in range(iv.first, iv.last + 1):
            said = pixels.get(f) if f in span else None
            if said is not None:
                out[f] = (iv.view, FrameVerdict(not said, "pixels"))
            else:
                centre = iv.centre_at(f) if f in span else None
                out[f] = (iv.view, FrameVerdict(not hidden_by_trail(f, drawn, theirs, centre), "trail"))
    return out


# ----- the counts ------------------------------------------------------------------------------------------------
@dataclass
class PersonLeaks:
    name: str
    reference: str
    on: dict[str, int] = field(default_factory=lambda: {v: 0 for v in VIEWS})
    leaked: dict[str, int] = field(default_factory=lambda: {v: 0 for v in VIEWS})
    by_pixels: int = 0  # frames judged from the output's pixels (the rest from the audit trail)
    leaked_runs: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # file -> leaked frames as runs
    notes: list[str] = field(default_factory=list)
    measured: bool = True  # False: `--person` where no person of the library holds their frames

    def add(self, file: str, verdicts: dict[int, tuple[str, FrameVerdict]]) -> None:
        for view, v in verdicts.values():
            self.on[view] += 1
            self.leaked[view] += v.leaked
            self.by_pixels += v.by == "pixels"
        leaked = [f for f, (_, v) in verdicts.items() if v.leaked]
        if leaked:
            self.leaked_runs[file] = runs(leaked)

    def rate(self, views: Sequence[str] = VIEWS) -> float | None:
        on = sum(self.on[v] for v in views)
        return sum(self.leaked[v] for v in views) / on if on else None

    def to_dict(self) -> dict:
        return {"person": self.name, "reference": self.reference, "on_screen": dict(self.on), "leaked": dict(self.leaked),
                "leak_rate": {v: _rounded(self.rate((v,))) for v in VIEWS} | {"all": _rounded(self.rate())},
                "judged_by_pixels": self.by_pixels, "judged_by_trail": sum(self.on.values()) - self.by_pixels,
                "over_bar": (self.rate() or 0.0) > BAR, "leaked_runs": self.leaked_runs, "notes": self.notes,
                "measured": self.measured}


@dataclass
class LeakRun:
    set_csv: Path
    style: str
    people: list[PersonLeaks]  # under `redact --ref THEIR_REFERENCE`
    index_seconds: float = 0.0
    measure_seconds: float = 0.0
    library: str | None = None
    by_person: list[PersonLeaks] | None = None  # under `redact --person` (None: the library has no people)

    def pooled(self, people: Sequence[PersonLeaks] | None = None) -> PersonLeaks:
        total = PersonLeaks("pooled", "")
        for p in self.people if people is None else people:
            for v in VIEWS:
                total.on[v] += p.on[v]
                total.leaked[v] += p.leaked[v]
            total.by_pixels += p.by_pixels
        return total

    def _counts(self, people: Sequence[PersonLeaks]) -> dict:
        pooled = self.pooled(people).to_dict()
        return {"pooled": {k: pooled[k] for k in ("on_screen", "leaked", "leak_rate", "judged_by_pixels", "judged_by_trail")},
                "over_bar": [p.name for p in people if (p.rate() or 0.0) > BAR],
                "per_person": [p.to_dict() for p in people]}

    def to_dict(self) -> dict:
        by_person = None
        if self.by_person is not None:
            by_person = self._counts(self.by_person) | {"not_measured": [p.name for p in self.by_person if not p.measured]}
        return {"set": str(self.set_csv), "kind": "presence", "style": self.style, "bar": BAR, "library": self.library,
                "index_seconds": round(self.index_seconds, 1), "measure_seconds": round(self.measure_seconds, 1),
                **self._counts(self.people), "person": by_person}

    def text(self) -> str:
        lines = _table(f"leaks of `redact --ref` on {self.set_csv} ({len(self.people)} people, style {self.style}): on-screen "
                       "frames not hidden, judged from the output's pixels where the head's centre is labelled, else the "
                       "audit trail", self.people, self.pooled())
        if self.by_person is None:
            lines.append("`redact --person`: not measured (the library has no people)")
        else:
            lines += _table("leaks of `redact --person` (the library's person that holds each one's labelled frames), judged "
                            "the same way", self.by_person, self.pooled(self.by_person))
        return "\n".join(lines)


def _table(title: str, people: Sequence[PersonLeaks], pooled: PersonLeaks) -> list[str]:
    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}%"

    def row(p: PersonLeaks) -> str:
        views = "".join(f"{(f'{p.leaked[v]}/{p.on[v]}' if p.on[v] else '-'):>12}" for v in VIEWS)
        total = sum(p.on.values())
        return (f"{p.name:<26}{total:>8}{sum(p.leaked.values()):>8}{pct(p.rate()):>8}{views}"
                f"{p.by_pixels:>8}{'  over 2%' if (p.rate() or 0.0) > BAR else ''}")

    lines = [title, f"{'person':<26}{'on':>8}{'leaked':>8}{'rate':>8}" + "".join(f"{v + ' leaked':>12}" for v in VIEWS) + f"{'pixels':>8}"]
    lines += [row(p) for p in people]
    lines.append(row(pooled))
    for p in people:
        where = "; ".join(f"{file} frames " + ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in spans[:6])
                          + (" ..." if len(spans) > 6 else "") for file, spans in p.leaked_runs.items())
        if where:
            lines.append(f"  {p.name} leaked: {where}")
        lines += [f"  {p.name}: {n}" for n in p.notes]
    return lines


# ----- the run ---------------------------------------------------------------------------------------------------
def bench_leaks(set_csv: Path, root: Path | None = None, style: str = "blur", work_dir: Path | None = None,
                library: Path | None = None, model: str | None = None, settings: IndexSettings | None = None,
                report: Report | None = None) -> LeakRun:
    """Index the set's videos, redact each person's with their reference and count their on-screen frames left visible."""
    from bench.presence import PresenceOptions

    say = report or (lambda line: None)
    people = read_presence_set(set_csv)
    root = root if root is not None else set_csv.parent
    files = list(dict.fromkeys(f for p in people for f in p.files))
    paths = {f: root / f for f in files}
    for path in paths.values():
        if not path.is_file():
            raise HeadsearchError(f"{path}: not found (the set's paths start from --root, here {root})")
    options = PresenceOptions(set_csv, root, library, model, settings or IndexSettings())
    with tempfile.TemporaryDirectory(prefix="leaks-") as tmp:
        lib = library or Path(tmp) / "library"
        work = Path(work_dir or Path(tmp) / "out")
        work.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        say(f"indexing {len(files)} videos into {lib}")
        _index(lib, list(paths.values()), options)
        t1 = time.perf_counter()
        by_ref, by_person = _measure(people, paths, root, lib, Path(tmp), work, options, style, say)
        return LeakRun(set_csv, style, by_ref, t1 - t0, time.perf_counter() - t1, str(library) if library else None, by_person)


def _measure(people: list[LabelledPerson], paths: dict[str, Path], root: Path, library: Path, tmp: Path, work: Path,
             options, style: str, say: Report) -> tuple[list[PersonLeaks], list[PersonLeaks] | None]:
    """Each person's leaks under `redact --ref THEIR_REFERENCE`, and under `redact --person` (the library's person that
    holds their labelled frames, `library_person`) where the library has people (None where it has none)."""
    # The one place this module reaches the redactor (actions.redact), so a move of it is one line to follow.
    from actions.redact import Redactor, Whom

    redactor = Redactor.open(library, options.model, options.settings)
    heads = {f: redactor.heads(p) for f, p in paths.items()}
    sightings = {f: _sightings(h, paths[f]) for f, h in heads.items()}
    has_people = any(h.members for h in heads.values())
    by_ref, by_person = [], [] if has_people else None
    for person in people:
        say(f"{person.name}: {person.reference.describe()}")
        photo = reference_photo(person.reference, root, tmp, person.name)
        by_ref.append(_leaks(person, people, Whom(photos=(photo,)), PersonLeaks(person.name, person.reference.describe()),
                             redactor, paths, heads, sightings, work, style, "redact --ref"))
        if by_person is None:
            continue
        held = library_person(person, sightings, {f: h.members for f, h in heads.items()})
        if held is None:
            by_person.append(PersonLeaks(person.name, "", notes=["no person of the library holds their labelled frames: "
                                                               "--person not measured"], measured=False))
            continue
        by_person.append(_leaks(person, people, Whom(person=str(held)), PersonLeaks(person.name, f"person {held}"),
                                redactor, paths, heads, sightings, work, style, "redact --person"))
    return by_ref, by_person


def _leaks(person: LabelledPerson, people: list[LabelledPerson], whom, result: PersonLeaks, redactor, paths: dict[str, Path],
           heads: dict, sightings: dict[str, dict[object, list[Sighting]]], work: Path, style: str, how: str) -> PersonLeaks:
    """One person's videos redacted for `whom` (`how`: the command, in notes) and each on-screen frame judged."""
    try:
        targets = redactor.targets(whom)
    except (NoHeadFound, HeadsearchError) as e:
        targets = None
        result.notes.append(f"{how} refuses the reference, nothing hidden: {e}")
    for file in person.files:
        intervals = [iv for iv in person.intervals if iv.file == file]
        rivals = [iv for p in people if p is not person for iv in p.intervals if iv.file == file]
        drawn: dict[int, list[tuple[object, Box]]] = {}
        theirs: set = set()
        pixels: dict[int, bool | None] = {}
        if targets is not None:
            output = work / f"{person.name.replace('/', '_')}-{Path(file).stem}{'-person' if whom.person else ''}.mp4"
            summary = redactor.redact(paths[file], whom, output, style, targets=targets, force=True, allow_none=True)
            drawn = trail_boxes(json.loads(summary.audit.read_text(encoding="utf-8")))
            theirs = {c.track.key for c in summary.chosen
                      if not someone_else(intervals, sightings[file].get(c.track.key, []), rivals)}
            if len(theirs) < len(summary.chosen):
                result.notes.append(f"{file}: {len(summary.chosen) - len(theirs)} of the {len(summary.chosen)} tracks "
                                    "chosen are someone else's (by the labelled centres): their boxes not counted")
            boxes = _pixel_boxes(intervals, sightings[file])
            if boxes:
                pixels = judge_pixels(paths[file], output, boxes)
        result.add(file, judge_file(intervals, drawn, theirs, pixels))
    return result


def library_person(person: LabelledPerson, sightings: dict[str, dict[object, list[Sighting]]],
                   members: dict[str, dict[object, int]]) -> int | None:
    """The library's person (id) whose tracks hold most of a labelled person's sighted on-screen frames: a frame counts
    for the person of the track sighted on it whose box holds the labelled centre there (`Interval.centre_at`, in the
    labelled span), the one whose box's centre is nearest it where several do (heads overlap in a crowd), or, in an
    interval without centres, of every track sighted on it. Tracks in no person count together: None where they hold
    the most (their frames are nobody's in the library), or where no track holds any."""
    held: dict[int | None, int] = {}
    for iv in person.intervals:
        span, tracks = pixel_span(iv), sightings.get(iv.file, {})
        at: dict[int, list[tuple[object, tuple[float, float, float, float]]]] = {}
        for key, seen in tracks.items():
            for f, box in seen:
                if iv.first <= f <= iv.last:
                    at.setdefault(f, []).append((key, box))
        for f, boxes in at.items():
            centre = iv.centre_at(f) if f in span else None
            if centre is None:
                if not iv.centres:
                    for key, _ in boxes:
                        pid = members.get(iv.file, {}).get(key)
                        held[pid] = held.get(pid, 0) + 1
                continue
            holding = [(math.dist(centre, ((x1 + x2) / 2, (y1 + y2) / 2)), key) for key, (x1, y1, x2, y2) in boxes
                       if x1 <= centre[0] <= x2 and y1 <= centre[1] <= y2]
            if holding:
                pid = members.get(iv.file, {}).get(min(holding, key=lambda h: h[0])[1])
                held[pid] = held.get(pid, 0) + 1
    if not held:
        return None
    return max(held, key=lambda pid: (held[pid], pid is None, -(pid or 0)))  # a tie with nobody: nobody


def _pixel_boxes(intervals: Sequence[Interval], sightings: dict[object, list[Sighting]]) -> dict[int, Box]:
    """The frames to judge from the pixels and the head box to judge on each (see the module's docstring)."""
    boxes = {}
    for iv in intervals:
        within = range(iv.first, iv.last + 1)
        for f in pixel_span(iv):
            centre = iv.centre_at(f)
            box = head_box_at(f, centre, sightings, within) if centre is not None else None
            if box is not None:
                boxes[f] = box
    return boxes


def judge_pixels(source: Path, output: Path, boxes: dict[int, Box]) -> dict[int, bool | None]:
    """Each frame's head box (frame -> box, the file's pixels): hidden in the output (True), left (False), or too little
    detail in the source to tell (None). The output keeps the source's frames one for one (headsearch's writer)."""
    import av

    from bench.redact import _region

    verdicts: dict[int, bool | None] = {}
    with av.open(str(source)) as a, av.open(str(output)) as b:
        for n, (fa, fb) in enumerate(zip(a.decode(video=0), b.decode(video=0), strict=False)):
            if n > max(boxes):
                break
            box = boxes.get(n)
            if box is None:
                continue
            src, dst = fa.to_ndarray(format="rgb24"), fb.to_ndarray(format="rgb24")
            if src.shape != dst.shape:
                raise HeadsearchError(f"{output}: frame {n} is {dst.shape[1]}x{dst.shape[0]}, the source's {src.shape[1]}x{src.shape[0]}")
            verdicts[n] = hidden(_region(detail(src), box, HEAD_CORE), _region(detail(dst), box, HEAD_CORE))
    return verdicts


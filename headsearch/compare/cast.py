"""`compare --cast`: a cast of characters across clips and shots.

A cast is a folder of folders (one per character, named by the folder, its photos inside) or a CSV of `name,photo`
rows (photos relative to the CSV's folder). Every track of every video goes to one character or to nobody (the
comparison's track assignment, the one scorer of a track); each head of each sampled frame is one entry (`CastHead`),
and a character's **appearances** are its heads grouped by video and shot, each with the tier it was counted as the
character's by (its best track as the scorer judged it: never `other_person`), its mean score, and the **gap** since the
character was last seen: the shots in between and the seconds, on the timeline of the videos one after the other, in
the order given. The report: per video its frames and each character's summary (JSON), the appearances as CSV, and an
HTML page with a score-against-gap plot; the text names every video, those where nobody of the cast was seen too.
Shots are numbered from 1 in every output (`shot_number`).
"""
from __future__ import annotations

import csv
import html
import io
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from headsearch.basics.errors import HeadsearchError
from headsearch.basics.media import media_kind
from headsearch.basics.text import counted
from headsearch.basics.timeline import format_time
from headsearch.compare.reference import Reference
from headsearch.compare.sightings import NO_HEAD, Sampled, carried_tiers, score_sighting, track_matches, unjudged_frame
from headsearch.compare.timeline import RANK, SAME_PERSON, coverage, view_of, views
from headsearch.detection.pose import face_yaw
from headsearch.evaluation.thresholds import Thresholds
from headsearch.evaluation.track_scores import TrackScore
from schemas.records import FileResult, MediaKind, Tier

APPEARANCE_FIELDS = ("character", "video", "shot", "start", "end", "frames", "tier", "score", "gap_shots", "gap_s")


def shot_number(index: int) -> int:
    """A shot as every output of a cast numbers it (text, page, CSV, JSON): from 1, in the video's order."""
    return index + 1


@dataclass(frozen=True)
class Character:
    name: str
    photos: tuple[Path, ...]


def read_cast(path: Path) -> list[Character]:
    """The characters of a cast folder (one folder a character, photos inside) or CSV (`name,photo`); one line when it
    names none, or a photo is not there."""
    path = Path(path)
    if path.is_dir():
        found = [Character(d.name, tuple(sorted(f for f in d.iterdir() if f.is_file() and media_kind(f) == MediaKind.IMAGE)))
                 for d in sorted(path.iterdir(), key=lambda d: d.name.casefold()) if d.is_dir() and not d.name.startswith(".")]
        empty = [c.name for c in found if not c.photos]
        if empty:
            raise HeadsearchError(f"{path / empty[0]}: no photos of {empty[0]} (a cast folder holds a folder of photos per character)")
    elif path.is_file():
        found = _cast_csv(path)
    else:
        raise HeadsearchError(f"{path}: no such cast (a folder of folders, one per character, or a CSV of name,photo)")
    if not found:
        raise HeadsearchError(f"{path}: no characters (a folder of folders, one per character, or a CSV of name,photo)")
    return found


def _cast_csv(path: Path) -> list[Character]:
    try:
        rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"))))
    except (OSError, UnicodeDecodeError) as e:
        raise HeadsearchError(f"{path}: cannot read the cast ({getattr(e, 'strerror', None) or e})") from e
    if rows and [c.strip().lower() for c in rows[0][:2]] == ["name", "photo"]:
        rows = rows[1:]
    photos: dict[str, list[Path]] = {}
    for n, row in enumerate(rows, 2):
        if not row or not "".join(row).strip():
            continue
        if len(row) < 2 or not row[0].strip() or not row[1].strip():
            raise HeadsearchError(f"{path}:{n}: a row is name,photo")
        photo = (path.parent / row[1].strip()).resolve()
        if not photo.is_file():
            raise HeadsearchError(f"{path}:{n}: {row[1].strip()}: no such photo")
        photos.setdefault(row[0].strip(), []).append(photo)
    return [Character(name, tuple(p)) for name, p in photos.items()]


@dataclass
class CastHead:
    """One head of one sampled frame, in cast mode: the character its track went to (None: nobody), its tier against
    that character, how it was judged; or, with `character` None and `tier` no_head, a sampled frame without a head."""

    time: float
    index: int  # the decoded frame's number
    shot: int
    character: str | None
    tier: str
    judged: str
    reason: str | None = None
    view: str | None = None
    identity: float | None = None
    head: float | None = None
    box: tuple[float, float, float, float] | None = None
    carried: bool = False
    end: float = 0.0  # the next sampled frame's time
    track: int | None = None  # its track (numbered from 1 in time order)
    match: TrackScore | None = field(default=None, repr=False)  # its track judged against its character (the scorer's)

    @property
    def score(self) -> float | None:
        return self.identity if self.identity is not None else self.head

    def to_dict(self) -> dict:
        return {"time": round(self.time, 3), "character": self.character, "tier": self.tier, "judged": self.judged, "reason": self.reason,
                "view": self.view, "identity": _rounded(self.identity), "head": _rounded(self.head),
                "box": None if self.box is None else [round(float(v), 1) for v in self.box], "frame": self.index,
                "shot": shot_number(self.shot), "track": self.track}


def _rounded(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)


def cast_heads(result: FileResult, references: Sequence[Reference], thresholds: Thresholds, appearance_dims: int = 0) -> list[CastHead]:
    """Every head of every sampled frame, each with the character (reference) its track went to, or nobody; a frame
    without a head is one entry of its own (no_head, and why). A head that went to nobody is tiered `other_person`, its
    scores those against the character it is most like."""
    v = Sampled.of(result)
    tracks = v.tracks
    matches = track_matches(tracks, references, thresholds, appearance_dims)
    owner = [None if m is None else m[0] for m in matches]
    scores = [{(n, o.frame_index): score_sighting(o, ref, thresholds, appearance_dims) for n, tr in enumerate(tracks) for o in tr.observations}
              for ref in references]
    carried = {n: carried_tiers(tr, n, scores[owner[n]]) for n, tr in enumerate(tracks) if owner[n] is not None}
    out = []
    for index, time, end, shot in v.frames():
        seen = v.at.get(index, [])
        if not seen:
            out.append(CastHead(time, index, shot, None, NO_HEAD, "none", unjudged_frame(v.unjudged.get(index, [])), end=end))
            continue
        for n, obs in sorted(seen, key=lambda x: x[1].head.center[0]):
            r = owner[n]
            if r is None:  # nobody's: scored against the character it is most like
                s = max((sc[n, index] for sc in scores), key=lambda x: (x.identity if x.identity is not None else -2.0,
                                                                        x.head if x.head is not None else -2.0), default=None)
                tier, was_carried, name = str(Tier.OTHER_PERSON), False, None
            else:
                s = scores[r][n, index]
                (tier, was_carried), name = carried[n][index], references[r].name
            identity, head = (s.identity, s.head) if s is not None else (None, None)
            judged = "face" if identity is not None else "head" if head is not None else "none"
            yaw = face_yaw(obs.face)
            out.append(CastHead(time, index, shot, name, tier, judged, "no_face" if judged == "none" else None,
                                None if judged == "none" else view_of(obs.face is not None, yaw), identity, head,
                                obs.head.as_tuple(), was_carried, end, n + 1, None if matches[n] is None else matches[n][1]))
    return out


@dataclass
class Appearance:
    """A character in one shot of one video."""

    character: str
    video: str
    shot: int
    start: float
    end: float
    heads: list[CastHead] = field(repr=False, default_factory=list)
    gap_shots: int | None = None  # shots since the character was last seen (None: first seen here)
    gap_s: float | None = None  # seconds since then, on the videos' joined timeline

    @property
    def match(self) -> TrackScore | None:
        """What counted it as the character's: its best track judged against the character by the one scorer of a track
        (matched by the face before the look alone, then the higher score); None for heads made without one."""
        matches = [h.match for h in self.heads if h.match is not None and h.match.tier is not None]
        return max(matches, key=lambda m: (not m.matched_without_face, m.score), default=None)

    @property
    def tier(self) -> str:
        """The tier it was counted as the character's by (never `other_person`: a track of another person is nobody's);
        without a judgement, the most frequent of its heads' tiers (the lower on a tie)."""
        match = self.match
        if match is not None:
            return str(match.tier)
        counts = Counter(h.tier for h in self.heads)
        return max(counts, key=lambda t: (counts[t], -RANK.get(t, 3)))

    @property
    def score(self) -> float | None:
        """The mean score of its heads scored on their own (not carried): identity where the face was judged, else the
        head score."""
        values = [h.score for h in self.heads if h.score is not None and not h.carried]
        return sum(values) / len(values) if values else None

    def to_dict(self) -> dict:
        score = self.score
        return {"character": self.character, "video": self.video, "shot": shot_number(self.shot), "start": round(self.start, 3), "end": round(self.end, 3),
                "frames": len(self.heads), "tier": self.tier, "score": None if score is None else round(score, 4),
                "gap_shots": self.gap_shots, "gap_s": None if self.gap_s is None else round(self.gap_s, 3)}


@dataclass
class CastVideo:
    """One video in cast mode: its heads, shots (start, end) and duration."""

    video: str
    heads: list[CastHead]
    shots: list[tuple[float, float]]
    duration: float
    start: float = 0.0


@dataclass
class CastRun:
    """The videos of one run, in order, and the cast's characters."""

    characters: list[str]
    videos: list[CastVideo]
    _appearances: list[Appearance] | None = field(default=None, init=False, repr=False)

    def appearances(self) -> list[Appearance]:
        """Every character's appearances, in time order, with the gap since each was last seen (worked out once)."""
        if self._appearances is None:
            self._appearances = self._worked_out()
        return self._appearances

    def _worked_out(self) -> list[Appearance]:
        out: list[Appearance] = []
        offset, shot_base = 0.0, 0
        last: dict[str, tuple[int, float]] = {}  # character -> (global shot, end on the joined timeline)
        for v in self.videos:
            groups: dict[tuple[str, int], Appearance] = {}
            for h in v.heads:
                if h.character is None:
                    continue
                a = groups.setdefault((h.character, h.shot), Appearance(h.character, v.video, h.shot, h.time, h.end))
                a.heads.append(h)
                a.start, a.end = min(a.start, h.time), max(a.end, h.end)
            for a in sorted(groups.values(), key=lambda a: (a.start, a.character)):
                shot, start = shot_base + a.shot, offset + a.start - v.start
                if a.character in last:
                    a.gap_shots = max(0, shot - last[a.character][0] - 1)
                    a.gap_s = max(0.0, start - last[a.character][1])
                last[a.character] = (shot, offset + a.end - v.start)
                out.append(a)
            offset += v.duration
            shot_base += max(1, len(v.shots))
        return out

    def summaries(self, video: str | None = None) -> list[dict]:
        """Per character (of one video, or of the run): appearances, frames, shares of same person and same look among
        its heads, mean score, how its heads were judged and seen, the longest gap."""
        apps = [a for a in self.appearances() if video is None or a.video == video]
        out = []
        for name in self.characters:
            mine = [a for a in apps if a.character == name]
            heads = [h for a in mine for h in a.heads]
            scored = [h.score for h in heads if h.score is not None and not h.carried]
            gaps = [a for a in mine if a.gap_s is not None]
            longest = max(gaps, key=lambda a: a.gap_s, default=None)
            out.append({"character": name, "appearances": len(mine), "frames": len(heads),
                        "same_person_share": round(sum(h.tier in SAME_PERSON for h in heads) / len(heads), 4) if heads else None,
                        "same_look_share": round(sum(h.tier == str(Tier.SAME_LOOK) for h in heads) / len(heads), 4) if heads else None,
                        "mean_score": round(sum(scored) / len(scored), 4) if scored else None,
                        "coverage": coverage(heads) if heads else None, "views": views(heads) if heads else None,
                        "first_seen": None if not mine else {"video": mine[0].video, "time": round(mine[0].start, 3)},
                        "longest_gap_s": None if longest is None else round(longest.gap_s, 3),
                        "longest_gap_shots": None if longest is None else longest.gap_shots,
                        "score_after_longest_gap": None if longest is None or longest.score is None else round(longest.score, 4)})
        return out

    def to_json(self, frames: bool = True) -> list[dict]:
        """Per video: its frames (one entry per head, and per frame without one) and each character's summary there,
        with its appearances."""
        apps = self.appearances()
        out = []
        for v in self.videos:
            entry = {"video": v.video, "characters": [{**s, "appearances": [a.to_dict() for a in apps if a.video == v.video and a.character == s["character"]]}
                                                      for s in self.summaries(v.video)]}
            if frames:
                entry["frames"] = [h.to_dict() for h in v.heads]
            out.append(entry)
        return out

    def csv_text(self) -> str:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=APPEARANCE_FIELDS, lineterminator="\n")
        w.writeheader()
        for a in self.appearances():
            w.writerow({k: "" if v is None else v for k, v in a.to_dict().items()})
        return buf.getvalue()

    def text_lines(self) -> list[str]:
        """Each character over the run, then each appearance after a gap."""
        lines = []
        for s in self.summaries():
            if not s["appearances"]:
                lines.append(f"{s['character']}: not seen")
                continue
            gap = ("" if s["longest_gap_s"] is None else f"; longest gap {s['longest_gap_s']:.1f} s ({counted(s['longest_gap_shots'], 'shot')}), "
                   + ("no score after it" if s["score_after_longest_gap"] is None else f"score {s['score_after_longest_gap']:.3f} after it"))
            lines.append(f"{s['character']}: {s['appearances']} appearance{'s' if s['appearances'] != 1 else ''}, {s['frames']} frames, "
                         f"same person {100 * s['same_person_share']:.0f}% (same look {100 * s['same_look_share']:.0f}%)"
                         + ("" if s["mean_score"] is None else f", mean {s['mean_score']:.3f}") + gap)
        apps = self.appearances()
        for v in self.videos:  # every video, in order: its appearances, or that none of the cast was seen there
            mine = [a for a in apps if a.video == v.video]
            if not mine:
                lines.append(f"  {Path(v.video).name}: {nobody_of_the_cast(v)}")
            for a in mine:
                score = "" if a.score is None else f" {a.score:.3f}"
                since = "first seen" if a.gap_s is None else f"after {a.gap_s:.1f} s, {counted(a.gap_shots, 'shot')}"
                lines.append(f"  {a.character:<16} {Path(a.video).name} shot {shot_number(a.shot)} {format_time(a.start)}-{format_time(a.end)} "
                             f"{a.tier}{score} ({since})")
        return lines


def nobody_of_the_cast(video: CastVideo) -> str:
    """A video where none of the cast was seen, in words: the heads that were there, or that there were none."""
    heads = sum(h.tier != NO_HEAD for h in video.heads)
    return ("nobody of the cast (no head in any sampled frame)" if not heads else
            f"nobody of the cast ({counted(heads, 'head sighting')}, none of them a character's)")


# ----- the page -------------------------------------------------------------------------------------------
PALETTE = ("#2f6fd1", "#d1572f", "#2e9d4f", "#8a3fc7", "#c79a1f", "#1f9ac7", "#c71f6f", "#5b6b2f")


def gap_plot_svg(run: CastRun, width: int = 720, height: int = 300) -> str:
    """Each appearance after a gap as a point: the seconds since the character was last seen (log scale) against its
    score, a colour a character; the identity bar's band under 0 is not drawn."""
    import math

    points = [a for a in run.appearances() if a.gap_s is not None and a.score is not None]
    left, right, top, bottom = 48, 16, 16, 40
    top_gap = max([a.gap_s for a in points] + [10.0])
    lo, hi = math.log10(0.1), math.log10(top_gap * 1.5)

    def x(g: float) -> float:
        return left + (width - left - right) * (math.log10(max(g, 0.1)) - lo) / (hi - lo)

    def y(v: float) -> float:
        return height - bottom - (height - top - bottom) * (min(max(v, -0.2), 1.0) + 0.2) / 1.2

    e = html.escape
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="cast-plot" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
           'role="img" aria-label="score against the gap since last seen">', f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
           f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" fill="none" stroke="#9aa1ab"/>']
    for v in (0.0, 0.25, 0.5, 0.75, 1.0):
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eceef1"/>'
                   f'<text x="{left - 6}" y="{y(v) + 4:.1f}" font-size="11" text-anchor="end" fill="#555">{v:.2f}</text>')
    for g in (0.1, 1, 10, 100, 1000, 10000):
        if g <= top_gap * 1.5:
            out.append(f'<line x1="{x(g):.1f}" x2="{x(g):.1f}" y1="{height - bottom}" y2="{height - bottom + 4}" stroke="#666"/>'
                       f'<text x="{x(g):.1f}" y="{height - bottom + 17}" font-size="11" text-anchor="middle" fill="#555">{g:g} s</text>')
    out.append(f'<text x="{(left + width - right) / 2:.0f}" y="{height - 6}" font-size="11" text-anchor="middle" fill="#555">'
               'seconds since the character was last seen</text>')
    colours = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(run.characters)}
    for a in points:
        out.append(f'<circle cx="{x(a.gap_s):.1f}" cy="{y(a.score):.1f}" r="4" fill="{colours[a.character]}" fill-opacity="0.8">'
                   f'<title>{e(a.character)}: {a.score:.3f} in {e(Path(a.video).name)} shot {shot_number(a.shot)}, {a.gap_s:.1f} s and '
                   f'{counted(a.gap_shots, "shot")} after last seen</title></circle>')
    out.append("</svg>")
    return "\n".join(out)


def cast_page(run: CastRun) -> str:
    """The cast report: each character's summary, the score-against-gap plot, and every appearance."""
    e = html.escape
    colours = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(run.characters)}
    rows = []
    for s in run.summaries():
        def pct(v):
            return "" if v is None else f"{100 * v:.0f}%"
        mean = "" if s["mean_score"] is None else f"{s['mean_score']:.3f}"
        gap = "" if s["longest_gap_s"] is None else f"{s['longest_gap_s']:.1f} s ({counted(s['longest_gap_shots'], 'shot')})"
        rows.append(f'<tr><td><i class="swatch" style="background:{colours[s["character"]]}"></i>{e(s["character"])}</td>'
                    f'<td>{s["appearances"]}</td><td>{s["frames"]}</td><td>{pct(s["same_person_share"])}</td><td>{pct(s["same_look_share"])}</td>'
                    f'<td>{mean}</td><td>{gap}</td></tr>')
    apps = []
    every = run.appearances()
    for a in [a for v in run.videos for a in ([a for a in every if a.video == v.video] or [v])]:  # in video order
        if isinstance(a, CastVideo):  # a video where none of the cast was seen
            apps.append(f'<tr class="nobody"><td class="muted">-</td><td>{e(Path(a.video).name)}</td><td colspan="5" class="muted">'
                        f'{e(nobody_of_the_cast(a))}</td></tr>')
            continue
        score = "" if a.score is None else f"{a.score:.3f}"
        since = "first seen" if a.gap_s is None else f"{a.gap_s:.1f} s, {counted(a.gap_shots, 'shot')}"
        apps.append(f'<tr><td>{e(a.character)}</td><td>{e(Path(a.video).name)}</td><td>{shot_number(a.shot)}</td><td>{format_time(a.start)}-{format_time(a.end)}</td>'
                    f'<td class="tier-{e(a.tier)}">{e(a.tier.replace("_", " "))}</td><td>{score}</td><td>{since}</td></tr>')
    unseen = sum(h.character is None and h.tier != NO_HEAD for v in run.videos for h in v.heads)
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>cast report</title><style>
body {{ font: 15px/1.45 system-ui, sans-serif; margin: 16px; color: #1d2330; background: #f6f7f9; max-width: 980px; }}
.card {{ background: #fff; border: 1px solid #dde1e6; border-radius: 8px; padding: 12px; margin: 12px 0; overflow-x: auto; }}
table {{ border-collapse: collapse; width: 100%; }} th, td {{ text-align: left; padding: 4px 8px; border-bottom: 1px solid #eceef1; }}
.swatch {{ display: inline-block; width: 10px; height: 10px; border-radius: 5px; margin-right: 6px; }}
.tier-other_person {{ color: #d13b3b; }} .tier-other_look {{ color: #a87a12; }} .tier-same_look {{ color: #2e7d42; }}
svg {{ max-width: 100%; height: auto; }} .muted {{ color: #5b6472; }}
</style></head><body>
<h1>Cast report</h1>
<p class="muted">{len(run.videos)} video{"s" if len(run.videos) != 1 else ""} in order: {", ".join(e(Path(v.video).name) for v in run.videos)};
{unseen} head sighting{"s" if unseen != 1 else ""} went to nobody.</p>
<div class="card"><table><tr><th>character</th><th>appearances</th><th>frames</th><th>same person</th><th>same look</th><th>mean score</th><th>longest gap</th></tr>
{"".join(rows)}</table></div>
<h2>Score against the gap since last seen</h2>
<div class="card">{gap_plot_svg(run)}<p class="muted">Each point: a character's appearance in a shot after it was last seen
(its mean identity score, else head score); a colour a character, as in the table above.</p></div>
<h2>Appearances</h2>
<div class="card"><table><tr><th>character</th><th>video</th><th>shot</th><th>time</th><th>tier</th><th>score</th><th>since last seen</th></tr>
{"".join(apps)}</table></div>
</body></html>
"""


def gate_lines(run: CastRun, fail_under: float | None, fail_under_look: float | None) -> list[str]:
    """A line for each character whose same-person (same-look) share over the run is under the gate."""
    out = []
    for s in run.summaries():
        for bar, share, what, flag in ((fail_under, s["same_person_share"], "same person", "--fail-under"),
                                       (fail_under_look, s["same_look_share"], "same look", "--fail-under-look")):
            if bar is not None and share is not None and share < bar:
                out.append(f"gate: {s['character']}: {what} on {100 * share:.1f}% of its frames, under {flag} {100 * bar:g}%")
    return out


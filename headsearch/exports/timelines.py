"""Moments as a timeline file: a selects timeline (one clip a moment, one track a person or query head, in rank or time
order, with handles) or markers on the whole source clips (named by person and tier, coloured by tier, the score
and track in their metadata); the format from the file's extension.

Times become frames on each file's own grid (`headsearch.basics.timeline.Timing`: its rate as editors count it,
30000/1001 for 29.97, its first frame as frame 0, its start timecode where it carries one): a moment from 1.519 s
in a file whose first frame is at 0.852 s starts on frame 20, source timecode 00:00:00:20 (or the file's start
timecode plus 20 frames). A variable-frame-rate file is placed on the grid its timestamps lie on (24000/1001 for a
24p file with dropped frames): its frames keep their times, the frames it skips count as frames of the grid.
"""
from __future__ import annotations

import csv
import html
import io
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path

from headsearch.basics.errors import HeadsearchError
from headsearch.basics.extras import install_hint, missing
from headsearch.basics.files import write_bytes_atomic
from headsearch.basics.text import counted, printable, shown_bytes
from headsearch.basics.timeline import Timing, format_time, probe_timing

EXPORT_EXTRA = ("opentimelineio",)


@dataclass(frozen=True)
class ExportFormat:
    """One export format, said once: read by the writers here, the CLI's options and the web app's links and answers."""

    suffix: str
    label: str  # its name on the web app's links
    named: str  # in help texts: the extension, and the editors that take it
    media_type: str  # of its download
    adapter: str | None = None  # the OpenTimelineIO adapter that writes it (None: written here)
    module: str | None = None  # the module that adapter comes in (the `export` extra installs it)
    one_video: bool = False  # it holds the moments of one video (a player's cues)

    def missing(self) -> list[str]:
        """The modules it needs that are not installed."""
        return missing(EXPORT_EXTRA + (self.module,)) if self.adapter else []


EXPORT_FORMATS = {f.suffix: f for f in (
    ExportFormat(".otio", "OTIO", ".otio", "application/json", "otio_json", "opentimelineio"),
    ExportFormat(".edl", "EDL", ".edl (CMX 3600)", "text/plain; charset=utf-8", "cmx_3600", "otio_cmx3600_adapter"),
    ExportFormat(".xml", "Premiere XML", ".xml (Premiere, Final Cut 7)", "application/xml", "fcp_xml", "otio_fcp_adapter"),
    ExportFormat(".fcpxml", "FCPXML", ".fcpxml", "application/xml", "fcpx_xml", "otio_fcpx_xml_adapter"),
    ExportFormat(".mlt", "MLT", ".mlt (Kdenlive, Shotcut)", "application/xml", "mlt_xml", "otio_mlt_adapter"),
    ExportFormat(".vtt", "VTT", ".vtt", "text/vtt; charset=utf-8", one_video=True),
    ExportFormat(".csv", "CSV", ".csv", "text/csv; charset=utf-8"),
)}
FORMATS = tuple(EXPORT_FORMATS)
FORMATS_HELP = ", ".join(f.named for f in EXPORT_FORMATS.values())
TIER_COLOURS = {"same_look": "GREEN", "other_look": "YELLOW", "other_person": "RED", None: "PURPLE"}
TIER_WORDS = {"same_look": "same look", "other_look": "other look", "other_person": "below the identity bar", None: "uncalibrated"}


@dataclass(frozen=True)
class Moment:
    """A time range of a file where a person (`group`: a person's name, a query head) is seen."""

    video: str
    start: float  # seconds on the file's timeline
    end: float
    group: str
    tier: str | None = None
    score: float | None = None
    track_id: int | None = None
    rank: int = 0  # its place in its group's answer, from 1
    joined: str | None = None  # a track joined within its shot to a hit's person: the cue in words ("same person, joined ...")


@dataclass(frozen=True)
class ExportOptions:
    markers: bool = False  # markers on the whole source clips, instead of a selects timeline
    handles_s: float = 0.0  # seconds added before and after each selected moment (within the file)
    order: str = "rank"  # "rank": each group's moments as they were ranked; "time": by file, then time
    name: str = "headsearch"


@dataclass
class Exported:
    """What was written: the file, its format, the moments on it, the files they reference, what was left out."""

    path: Path
    format: str
    moments: int  # what it holds: moments, or with `items` "chapter", chapters
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    items: str = "moment"

    def line(self) -> str:
        return (f"exported {counted(self.moments, self.items)} of {counted(len(self.files), 'file')} to {self.path} ({self.format})"
                + "".join(f"; {note}" for note in self.notes))


def export_format(path: Path) -> str:
    """The format a file name asks for; one line naming the known ones otherwise."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise HeadsearchError(f"{path}: no export format for {suffix or 'a name without an extension'} "
                              f"(one of {', '.join(FORMATS)})")
    return suffix


def export_target(path: Path) -> str:
    """The format of a file to export into, checked before any work: a known format, its extra installed, a folder
    that exists (a mistyped one is said, not made)."""
    suffix = export_format(path)
    require_export_extra(suffix)
    if not Path(path).parent.is_dir():
        raise HeadsearchError(f"{Path(path).parent}: no such folder to export into (create it first)")
    return suffix


def check_one_video(suffix: str, moments: Sequence[Moment], chapters: bool = False, hint: str = "") -> None:
    """One line when a format that holds one video's cues is given the moments of several (`hint`: how to narrow them)."""
    if EXPORT_FORMATS[suffix].one_video and not chapters and len({m.video for m in moments}) > 1:
        raise HeadsearchError(f"a {suffix} file holds the cues of one video{hint}")


def require_export_extra(suffix: str) -> None:
    """One line when OpenTimelineIO or the adapter a format needs is not installed."""
    gone = EXPORT_FORMATS[suffix].missing()
    if gone:
        raise HeadsearchError(f"exporting {suffix} needs {', '.join(dict.fromkeys(gone))}, which the lean install leaves out: "
                              f"{install_hint('export')}")


def timings(moments: Sequence[Moment]) -> dict[str, Timing]:
    """Each file's frame grid; a file that cannot be read is one line."""
    out = {}
    for video in dict.fromkeys(m.video for m in moments):
        t = probe_timing(video)
        if t is None:
            raise HeadsearchError(f"{video}: cannot read its frames' timing to export it (is it still there?)")
        out[video] = t
    return out


@dataclass(frozen=True)
class Placed:
    """A moment on its file's frame grid: [first, last) frames, handles included, within the file."""

    moment: Moment
    timing: Timing
    first: int
    last: int


def placed(moments: Sequence[Moment], grid: dict[str, Timing], handles_s: float = 0.0) -> list[Placed]:
    out = []
    for m in moments:
        t = grid[m.video]
        handle = int(round(handles_s * float(t.rate)))
        first = max(0, t.frame_at(m.start) - handle)
        last = min(t.frames, max(t.frame_at(m.end), t.frame_at(m.start) + 1) + handle)
        out.append(Placed(m, t, first, max(last, first + 1)))
    return out


def ordered(moments: Sequence[Moment], order: str) -> list[Moment]:
    """"rank": as given (each group's moments as they were ranked); "time": by file, then time."""
    return sorted(moments, key=lambda m: (m.video, m.start, m.group)) if order == "time" else list(moments)


def export(path: Path, moments: Sequence[Moment], options: ExportOptions = ExportOptions(),
           shots: dict[str, list[tuple[float, float]]] | None = None, chapters: bool = False) -> Exported:
    """Write moments to `path` in the format its extension names (see `FORMATS`). `shots` (file -> shot ranges) and
    `chapters` make a WebVTT file of chapters, one a shot, instead of one cue a moment."""
    suffix = export_target(path)
    path = Path(path)
    data, done = export_bytes(suffix, moments, options, shots, chapters)
    try:
        write_bytes_atomic(path, data)
    except OSError as e:
        raise HeadsearchError(f"{path}: cannot write the export ({e.strerror or e})") from e
    done.path = path
    return done


def export_all(paths: Sequence[Path], moments: Sequence[Moment], options: ExportOptions = ExportOptions(),
               shots: dict[str, list[tuple[float, float]]] | None = None, chapters: bool = False, hint: str = "") -> list[Exported]:
    """The moments to each file (see `export`): every file is checked (its format, its extra, its folder, one video
    where its format holds one: `hint` says how to narrow them) before any is written."""
    for path in paths:
        check_one_video(export_target(path), moments, chapters, hint)
    return [export(path, moments, options, shots, chapters) for path in paths]


def export_bytes(suffix: str, moments: Sequence[Moment], options: ExportOptions = ExportOptions(),
                 shots: dict[str, list[tuple[float, float]]] | None = None, chapters: bool = False) -> tuple[bytes, Exported]:
    """The bytes of an export in format `suffix` (".otio", ...), and what it holds."""
    require_export_extra(suffix)
    check_one_video(suffix, moments, chapters)
    moments = [m for m in moments if m.end >= m.start]
    if not moments and not chapters:
        raise HeadsearchError("nothing to export: no moments in videos")
    grid = timings(moments)
    notes = [f"{Path(v).name} has a variable frame rate: placed on its {_rate_text(t.rate)} timestamp grid"
             for v, t in grid.items() if t.variable]
    if suffix == ".vtt":
        data = vtt(moments, shots or {}, chapters)
    elif suffix == ".csv":
        data = csv_rows(placed(ordered(moments, options.order), grid, options.handles_s))
    else:
        if suffix == ".mlt":  # MLT places clips by frames from the file's first, whatever its start timecode
            grid = {v: replace(t, timecode=None) for v, t in grid.items()}
        data = _adapter_bytes(suffix, timeline(moments, grid, options), grid)
    if chapters and suffix == ".vtt":
        return data, Exported(Path(f"export{suffix}"), "vtt", sum(map(len, (shots or {}).values())), list(shots or {}), notes, "chapter")
    return data, Exported(Path(f"export{suffix}"), suffix.lstrip("."), len(moments), list(grid or shots or {}), notes)


def moment_dict(m: Moment) -> dict:
    return _metadata(m)["headsearch"]


def _rate_text(rate: Fraction) -> str:
    return f"{rate.numerator}/{rate.denominator}" if rate.denominator != 1 else str(rate.numerator)


# ----- OpenTimelineIO ------------------------------------------------------------------------------
def _time(otio, frames: int, t: Timing):
    return otio.opentime.RationalTime(frames, float(t.rate))


def _start(otio, t: Timing):
    """The file's start timecode as a time at its rate (0 without one, or where the format counts frames from the
    file's first: `Timing.timecode` None)."""
    if t.timecode:
        try:
            return otio.opentime.from_timecode(t.timecode.replace(";", ":") if t.rate.denominator == 1 else t.timecode, float(t.rate))
        except (ValueError, TypeError):
            pass
    return otio.opentime.RationalTime(0, float(t.rate))


def _reference(otio, video: str, t: Timing):
    start = _start(otio, t)
    return otio.schema.ExternalReference(target_url=Path(video).resolve().as_uri(),
                                         available_range=otio.opentime.TimeRange(start, _time(otio, t.frames, t)))


def _metadata(m: Moment) -> dict:
    """A moment's fields as a timeline item keeps them (OpenTimelineIO's text cannot hold a file name's bytes that are
    not UTF-8: they are written as escapes, `shown_bytes`)."""
    return {"headsearch": {"video": shown_bytes(m.video), "start": round(m.start, 3), "end": round(m.end, 3), "person": shown_bytes(m.group), "tier": m.tier,
                           "score": None if m.score is None else round(m.score, 4), "track_id": m.track_id, "rank": m.rank,
                           **({"joined": m.joined} if m.joined else {})}}


def timeline(moments: Sequence[Moment], grid: dict[str, Timing], options: ExportOptions):
    """An OpenTimelineIO timeline of the moments (see the module's docstring)."""
    import opentimelineio as otio

    tl = otio.schema.Timeline(name=options.name)
    if options.markers:
        track = otio.schema.Track(name="sources", kind=otio.schema.TrackKind.Video)
        for video, t in grid.items():
            ref = _reference(otio, video, t)
            clip = otio.schema.Clip(name=shown_bytes(Path(video).name), media_reference=ref, source_range=ref.available_range)
            for p in placed([m for m in moments if m.video == video], grid):
                m = p.moment
                joined = f" ({m.joined})" if m.joined else ""
                marker = otio.schema.Marker(name=shown_bytes(f"{m.group} {TIER_WORDS.get(m.tier, m.tier)}{joined}"),
                                            marked_range=otio.opentime.TimeRange(_start(otio, t) + _time(otio, p.first, t),
                                                                                 _time(otio, p.last - p.first, t)),
                                            color=getattr(otio.schema.MarkerColor, TIER_COLOURS.get(m.tier, "PURPLE")), metadata=_metadata(m))
                marker.comment = f"score {'-' if m.score is None else f'{m.score:.3f}'}, track {m.track_id}"
                clip.markers.append(marker)
            track.append(clip)
        tl.tracks.append(track)
        return tl
    for group in dict.fromkeys(m.group for m in moments):
        track = otio.schema.Track(name=shown_bytes(group), kind=otio.schema.TrackKind.Video)
        for p in placed(ordered([m for m in moments if m.group == group], options.order), grid, options.handles_s):
            m, t = p.moment, p.timing
            clip = otio.schema.Clip(name=shown_bytes(f"{m.group} {m.rank}: {Path(m.video).name}"), media_reference=_reference(otio, m.video, t),
                                    source_range=otio.opentime.TimeRange(_start(otio, t) + _time(otio, p.first, t),
                                                                         _time(otio, p.last - p.first, t)),
                                    metadata=_metadata(m))
            track.append(clip)
        tl.tracks.append(track)
    return tl


def _adapter_bytes(suffix: str, tl, grid: dict[str, Timing]) -> bytes:
    import opentimelineio as otio

    adapter = EXPORT_FORMATS[suffix].adapter
    rates = sorted({t.rate for t in grid.values()})
    options = {}
    if suffix == ".edl":
        options["rate"] = float(rates[0])  # an EDL has one rate: other files' frames are converted to it (nearest)
        tl = _one_track(otio, tl)
    if suffix == ".fcpxml":
        table = otio.adapters.from_name(adapter).module().FRAMERATE_FRAMEDURATION
        for r in rates:  # the adapter knows 29.97 as 29.97, not 30000/1001: tell it each file's exact frame duration
            table.setdefault(float(r), f"{r.denominator}/{r.numerator}s")
    names = _printable_names(tl, tokens=suffix == ".fcpxml") if suffix != ".otio" else {}
    text = otio.adapters.write_to_string(tl, adapter, **options)
    if suffix == ".mlt":
        text = _with_mlt_profile(text, grid)
    for token, name in names.items():
        text = text.replace(token, html.escape(name, quote=True))  # an XML attribute's value, either quote
    return text.encode("utf-8")


def _with_mlt_profile(text: str, grid: dict[str, Timing]) -> str:
    """The MLT document with a profile (the first file's frame size and rate): the adapter writes an empty one
    (`<profile decsription="automatic"/>`, so spelled), with which melt renders its default 720x576 at 25 fps,
    letterboxed."""
    import xml.etree.ElementTree as ET

    first = next((t for t in grid.values() if t.size), None)
    if first is None:
        return text
    root = ET.fromstring(text)
    profile = root.find("profile")
    if profile is None:
        profile = ET.Element("profile")
        root.insert(0, profile)
    elif profile.get("width"):
        return text
    (w, h), rate = first.size, first.rate
    g = math.gcd(w, h)
    profile.attrib.clear()
    profile.attrib.update({"description": f"{w}x{h} {float(rate):.3f} fps", "width": str(w), "height": str(h),
                           "frame_rate_num": str(rate.numerator), "frame_rate_den": str(rate.denominator), "progressive": "1",
                           "sample_aspect_num": "1", "sample_aspect_den": "1", "display_aspect_num": str(w // g),
                           "display_aspect_den": str(h // g)})
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


def _one_track(otio, tl):
    """The timeline with its tracks one after another on one track, as an EDL holds one: each clip keeps its name, the
    group's (a person, a query head) and its rank."""
    if len(tl.tracks) <= 1:
        return tl
    one = otio.schema.Track(name=tl.name, kind=otio.schema.TrackKind.Video)
    for track in tl.tracks:
        for clip in track:
            one.append(clip.deepcopy())
    joined = otio.schema.Timeline(name=tl.name)
    joined.tracks.append(one)
    return joined


def _printable_names(tl, tokens: bool) -> dict[str, str]:
    """Every name, comment and metadata text of the timeline made printable for a text format (control characters
    escaped, `headsearch.basics.text.printable`: XML cannot hold them, and a newline in an EDL's comment line would
    start a line, an event, of its own). With `tokens`, each name is also swapped for a token, returned with the name
    it stands for, which the caller puts back escaped into the written text: the FCPXML adapter finds its elements
    again by XPath built from their names, which a quote in a file name breaks."""
    token_of: dict[str, str] = {}
    stamp = uuid.uuid4().hex

    def named(text: str) -> str:
        text = printable(text)
        if not tokens:
            return text
        return token_of.setdefault(text, f"hs{stamp}n{len(token_of)}")  # one name, one token: the adapter matches names

    clips = list(tl.find_clips())
    markers = [m for c in clips for m in c.markers]
    for item in (tl, *tl.tracks, *clips, *markers):
        item.name = named(item.name)
        fields = item.metadata.get("headsearch")
        if fields is not None:
            item.metadata["headsearch"] = {k: printable(v) if isinstance(v, str) else v for k, v in fields.items()}
    for marker in markers:
        marker.comment = printable(marker.comment)
    return {token: text for text, token in token_of.items()}


# ----- WebVTT and CSV ------------------------------------------------------------------------------
def vtt_time(seconds: float) -> str:
    """A cue's time: hh:mm:ss.mmm."""
    return format_time(seconds, hour_digits=2)


def vtt(moments: Sequence[Moment], shots: dict[str, list[tuple[float, float]]], chapters: bool = False) -> bytes:
    """WebVTT cues: one a moment ("who is on screen": the person, and the tier where there is one), or with
    `chapters` one a shot. Cue times are on the file's timeline, as players count them."""
    lines = ["WEBVTT", ""]
    if chapters:
        for video, ranges in shots.items():
            for i, (a, b) in enumerate(ranges, 1):
                lines += [f"shot-{i}", f"{vtt_time(a)} --> {vtt_time(b)}", f"Shot {i}" + ("" if len(shots) == 1 else f" of {Path(video).name}"), ""]
        return "\n".join(lines).encode("utf-8")
    for n, m in enumerate(sorted(moments, key=lambda m: (m.start, m.group)), 1):
        label = printable(m.group).replace("-->", "->")  # one line: a newline would end the cue (a blank one, start another)
        tier = f" ({TIER_WORDS[m.tier]})" if m.tier in ("same_look", "other_look") else ""
        tier += f" ({m.joined})" if m.joined else ""
        lines += [f"{n}", f"{vtt_time(m.start)} --> {vtt_time(max(m.end, m.start + 0.001))}", f"{label}{tier}", ""]
    return "\n".join(lines).encode("utf-8")


CSV_FIELDS = ("person", "rank", "video", "start", "end", "rate", "first_frame", "last_frame", "source_in", "source_out",
              "tier", "score", "track_id")


def csv_rows(items: Sequence[Placed]) -> bytes:
    """One row a moment: its times, its frames on the file's grid ([first, last)), the source timecodes."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for p in items:
        m, t = p.moment, p.timing
        w.writerow({"person": cell_text(m.group), "rank": m.rank, "video": cell_text(m.video), "start": round(m.start, 3), "end": round(m.end, 3),
                    "rate": _rate_text(t.rate), "first_frame": p.first, "last_frame": p.last, "source_in": timecode(p.first, t),
                    "source_out": timecode(p.last, t), "tier": m.tier or "", "score": "" if m.score is None else round(m.score, 4),
                    "track_id": "" if m.track_id is None else m.track_id})
    return buf.getvalue().encode("utf-8")


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet reads as a formula at a cell's start


def cell_text(text: str) -> str:
    """Text for a CSV cell that a spreadsheet shows as text, on one line: control characters escaped (`printable`), and
    one that would start a formula gets a leading apostrophe (OWASP's advice for CSV injection), as a person or photo
    named `=HYPERLINK(...)` would."""
    text = printable(text)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def timecode(frames: int, t: Timing) -> str:
    """SMPTE HH:MM:SS:FF of a frame from the file's start timecode (non-drop; frames counted at the nominal rate)."""
    fps = round(float(t.rate))
    start = 0
    if t.timecode:
        parts = t.timecode.replace(";", ":").split(":")
        if len(parts) == 4 and all(p.isdigit() for p in parts):
            hh, mm, ss, ff = (int(p) for p in parts)
            start = ((hh * 60 + mm) * 60 + ss) * fps + ff
    total = start + frames
    ff = total % fps
    s = total // fps
    return f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}:{ff:02d}"

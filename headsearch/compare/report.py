"""What a comparison shows: a terminal table, the similarity-over-time plot (SVG: tier bands, scores, bars, cuts,
drift events), HTML pages (one per video and reference, and a leaderboard of many), and a CSV of the leaderboard.
The CLI's `compare --report` and the web app's Compare page show the same plot and segments."""
from __future__ import annotations

import csv
import html
import io
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import jinja2
import numpy as np

from headsearch.basics.errors import HeadsearchError, MediaError
from headsearch.basics.files import write_bytes_atomic
from headsearch.basics.frames import draw_box, frame_at
from headsearch.basics.images import encode_jpeg
from headsearch.basics.text import printable
from headsearch.basics.timeline import format_time
from headsearch.compare.timeline import NO_HEAD, RANK, SAME_PERSON, Comparison, Frame

TIER_COLOURS = {"same_look": "#2e9d4f", "other_look": "#e0a526", "other_person": "#d13b3b", NO_HEAD: "#b9bec7"}
TIER_WORDS = {"same_look": "same look", "other_look": "same person, other look", "other_person": "other person", NO_HEAD: "no head"}
VERDICT_WORDS = {"same_look": "same person, same look", "other_look": "same person, other look", "drift": "drift: the person or look changes",
                 "other_person": "another person", "no_head": "no head seen"}
WORST_FRAMES = 4
LEADERBOARD_FIELDS = ("rank", "video", "reference", "verdict", "same_person_share", "same_look_share", "other_look_share",
                      "other_person_share", "no_head_share", "drifts", "facesim", "face_frames", "faceless_head_frames", "frames",
                      "duration", "report")


# ----- text ------------------------------------------------------------------------------------------
def percent(x: float) -> str:
    return f"{100 * x:.0f}%"


def summary_line(c: Comparison) -> str:
    s = c.summary()
    sh = s["shares"]
    facesim = "n/a" if s["facesim"] is None else f"{s['facesim']:.3f}"
    drifts = f", {len(c.drifts)} drift event{'s' if len(c.drifts) != 1 else ''}" if c.drifts else ""
    return (f"{printable(c.video)}  vs {printable(c.reference.name)}: {c.verdict} ({VERDICT_WORDS[c.verdict]}); same person on {percent(c.same_person_share)} "
            f"of {s['head_frames']} head frame{'s' if s['head_frames'] != 1 else ''} (same look {percent(sh['same_look'])}, other look "
            f"{percent(sh['other_look'])}, other person {percent(sh['other_person'])}, no head {percent(sh['no_head'])} of "
            f"{s['frames']} frames){drifts}; FaceSim-style {facesim} over {s['frames_with_any_face']} frames with a face "
            f"({s['facesim_skipped_frames']} skipped)")


def whole_percents(shares: dict[str, float]) -> dict[str, int]:
    """Shares that add up to 1 as whole percents that add up to 100 (the largest remainders rounded up)."""
    exact = {k: 100 * v for k, v in shares.items()}
    out = {k: int(v) for k, v in exact.items()}
    for k in sorted(exact, key=lambda k: out[k] - exact[k])[: max(0, round(sum(exact.values())) - sum(out.values()))]:
        out[k] += 1
    return out


def coverage_line(c: Comparison) -> str:
    """How the frames were judged, in whole percents that add up to 100: "judged by face 62%, by head look 31%, not
    judged 7%: 5% too small, 2% no head"."""
    cov = c.summary()["coverage"]
    reasons = cov["reasons"]
    pct = whole_percents({"face": cov["face"], "head": cov["head"], **{f"none:{r}": v for r, v in reasons.items()}})
    none = sum(v for k, v in pct.items() if k.startswith("none:"))
    why = ", ".join(f"{pct[f'none:{r}']}% {r.replace('_', ' ')}" for r in reasons)
    return f"judged by face {pct['face']}%, by head look {pct['head']}%, not judged {none}%" + (f": {why}" if why else "")


def views_line(c: Comparison) -> str:
    """The person's views among the judged frames, each with its mean score."""
    views = c.summary()["views"]
    shown = [f"{v.replace('_', '-')} {percent(d['share'])}" + ("" if d["mean_score"] is None else f" ({d['mean_score']:.3f})")
             for v, d in views.items() if d["frames"]]
    return "views: " + (", ".join(shown) if shown else "none judged")


def text_lines(c: Comparison) -> list[str]:
    """A comparison as text: its summary line, how its frames were judged and the person's views, its segments and
    drift events, times h:mm:ss.mmm."""
    lines = [summary_line(c), f"  {coverage_line(c)}", f"  {views_line(c)}"]
    if c.warning:
        lines.append(f"  warning: {c.warning}")
    for seg in c.segments:
        score = "" if seg.score is None else f"  {'identity' if seg.identity is not None else 'head'} {seg.score:.3f}"
        shots = sorted({f.shot for f in seg.frames})
        where = f"shot {shots[0] + 1}" if len(shots) == 1 else f"shots {shots[0] + 1}-{shots[-1] + 1}"
        faces = sum(f.face for f in seg.frames)
        lines.append(f"  {format_time(seg.start)}-{format_time(seg.end)}  {seg.tier:<12}{score}  ({where}, {len(seg.frames)} "
                     f"frame{'s' if len(seg.frames) != 1 else ''}, {faces} with a face)")
    for d in c.drifts:
        lines.append(f"  drift at {format_time(d.time)}: {d.before} -> {d.after}{' (at a cut)' if d.at_cut else ''}")
    if c.seams is not None:
        scored = [m for m in c.seams if m.drop is not None]
        moves = "; ".join(f"{format_time(m.time)} (frame {m.frame}) {m.before:.3f} -> {m.after:.3f}" for m in scored[:3])
        lines.append(f"  {len(c.seams)} seam{'s' if len(c.seams) != 1 else ''} between chunks" +
                     (f", the largest moves: {moves}" if moves else ", none with the person scored on both sides"))
    return lines


def table_lines(comparisons: Sequence[Comparison]) -> list[str]:
    """Several comparisons as one table, most consistent first (`leaderboard`)."""
    rows = [["video", "reference", "verdict", "same person", "same look", "other person", "no head", "drifts", "FaceSim", "no face"]]
    for c in leaderboard(comparisons):
        s = c.summary()
        rows.append([printable(Path(c.video).name), printable(c.reference.name), c.verdict, percent(s["same_person_share"]), percent(s["same_look_share"]),
                     percent(s["shares"]["other_person"]), percent(s["shares"]["no_head"]), str(s["drifts"]),
                     "n/a" if s["facesim"] is None else f"{s['facesim']:.3f}", f"{s['faceless_head_frames']}/{s['frames']}"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(widths[i]) if i < 3 else cell.rjust(widths[i]) for i, cell in enumerate(r)).rstrip() for r in rows]


# ----- the plot --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlotSize:
    width: int = 900
    height: int = 250
    left: int = 44
    right: int = 12
    band: int = 16  # the tier band's height, at the top
    top: int = 30  # the score area starts below the band and the face strip
    bottom: int = 28


def _ticks(start: float, end: float, n: int = 8) -> list[float]:
    span = max(end - start, 1e-6)
    raw = span / n
    step = min((s for s in (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600) if s >= raw), default=3600.0)
    first = np.ceil(start / step) * step
    return [float(t) for t in np.arange(first, end + 1e-9, step)]


def _tick_label(t: float, span: float) -> str:
    if span >= 600:
        return format_time(t)[:-4]
    return f"{t:.1f}s" if span < 20 else f"{t:.0f}s"


class _Plot:
    """One comparison's plot: its scales, and each layer as SVG elements."""

    LOW, HIGH = -0.2, 1.0  # the score axis

    def __init__(self, c: Comparison, size: PlotSize):
        self.c, self.size = c, size
        self.start = c.start
        self.end = max([c.start + c.duration] + [f.end for f in c.frames]) if c.frames else c.start + max(c.duration, 1e-3)
        self.span = max(self.end - self.start, 1e-6)
        self.x0, self.x1, self.y0, self.y1 = size.left, size.width - size.right, size.top, size.height - size.bottom

    def x(self, t: float) -> float:
        return self.x0 + (self.x1 - self.x0) * (t - self.start) / self.span

    def y(self, v: float) -> float:
        return self.y1 - (self.y1 - self.y0) * (min(max(v, self.LOW), self.HIGH) - self.LOW) / (self.HIGH - self.LOW)

    def at(self, f: Frame) -> float:
        """Where a sampled frame's score is drawn: at its own time (the middle of its interval drew it half a sampling
        interval late)."""
        return self.x(f.time)

    def bands(self) -> list[str]:
        """The tier of each segment, and under it a strip: the person's face seen (dark) or not (orange)."""
        out, x, e = [], self.x, html.escape
        for seg in self.c.segments:
            out.append(f'<rect x="{x(seg.start):.1f}" y="4" width="{max(x(seg.end) - x(seg.start), 0.8):.1f}" height="{self.size.band}" '
                       f'fill="{TIER_COLOURS[seg.tier]}"><title>{format_time(seg.start)}-{format_time(seg.end)} {e(TIER_WORDS[seg.tier])}'
                       f'{"" if seg.score is None else f" ({seg.score:.3f})"}</title></rect>')
        for f in self.c.frames:
            if f.tier == NO_HEAD:
                continue
            colour, what = (("#4b5260", "face visible") if f.face else
                            ("#f0b35b", "no face: " + ("tier carried from the track's face" if f.carried else "scored by the head alone")))
            out.append(f'<rect x="{x(f.time):.1f}" y="{self.size.band + 6}" width="{max(x(f.end) - x(f.time), 0.8):.1f}" height="3" '
                       f'fill="{colour}"><title>{format_time(f.time)} {what}</title></rect>')
        return out

    def axes(self) -> list[str]:
        """The frame, the score grid, time ticks, cuts and the bars the scores are held to."""
        x, y, (x0, x1, y0, y1) = self.x, self.y, (self.x0, self.x1, self.y0, self.y1)
        out = [f'<rect x="{x0}" y="{y0}" width="{x1 - x0}" height="{y1 - y0}" fill="none" stroke="#9aa1ab" stroke-width="1"/>']
        for v in (0.0, 0.25, 0.5, 0.75, 1.0):
            out.append(f'<line x1="{x0}" x2="{x1}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eceef1"/>'
                       f'<text x="{x0 - 6}" y="{y(v) + 4:.1f}" font-size="11" text-anchor="end" fill="#555">{v:.2f}</text>')
        for t in _ticks(self.start, self.end):
            out.append(f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{y1}" y2="{y1 + 4}" stroke="#666"/>'
                       f'<text x="{x(t):.1f}" y="{y1 + 17}" font-size="11" text-anchor="middle" fill="#555">{_tick_label(t, self.span)}</text>')
        for a, _ in self.c.shots[1:]:
            out.append(f'<line x1="{x(a):.1f}" x2="{x(a):.1f}" y1="{y0}" y2="{y1}" stroke="#7d8590" stroke-dasharray="2,3">'
                       f'<title>cut at {format_time(a)}</title></line>')
        t = self.c.thresholds
        bars = [("identity bar", t.identity, "#2f6fd1"), ("same-look bar", t.same_look, "#8a3fc7")]
        if t.appearance is not None and any(not f.face and f.head is not None for f in self.c.frames):
            bars.append(("appearance bar", t.appearance, "#8a3fc7"))
        for name, v, colour in bars:
            out.append(f'<line x1="{x0}" x2="{x1}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="{colour}" stroke-dasharray="6,4" '
                       f'stroke-width="1"><title>{name} {v:.3f}</title></line>'
                       f'<text x="{x1 - 4}" y="{y(v) - 3:.1f}" font-size="10" text-anchor="end" fill="{colour}">{name} {v:.2f}</text>')
        return out

    def scores(self) -> list[str]:
        """Identity scores (a line through them) and head scores; rings where the head shows no face."""
        points = [(self.at(f), self.y(f.identity)) for f in self.c.frames if f.identity is not None]
        out = ['<polyline fill="none" stroke="#2f6fd1" stroke-width="1.2" stroke-opacity="0.6" points="'
               + " ".join(f"{px:.1f},{py:.1f}" for px, py in points) + '"/>'] if len(points) > 1 else []
        for f in self.c.frames:
            note = "" if f.face else (", no face, tier carried from the track" if f.carried else ", no face")
            for name, colour, v in (("head", "#8a3fc7", f.head), ("identity", "#2f6fd1", f.identity)):
                if v is not None:
                    out.append(f'<circle cx="{self.at(f):.1f}" cy="{self.y(v):.1f}" r="{2.6 if name == "identity" else 2.3}" '
                               f'fill="{colour if f.face else "#ffffff"}" stroke="{colour}" stroke-width="1"><title>{format_time(f.time)} '
                               f'{name} {v:.3f} ({html.escape(TIER_WORDS[f.tier])}{note})</title></circle>')
        return out

    def seams(self) -> list[str]:
        """Where generated chunks meet: orange dashes, the worst three thicker."""
        out = []
        for rank, m in enumerate(self.c.seams or []):
            px = self.x(m.time)
            moved = "" if m.drop is None else f": {m.before:.3f} to {m.after:.3f}"
            out.append(f'<line class="seam" x1="{px:.1f}" x2="{px:.1f}" y1="{self.y0}" y2="{self.y1}" stroke="#e07b26" '
                       f'stroke-width="{2 if rank < 3 and m.drop is not None else 1}" stroke-dasharray="4,2">'
                       f'<title>seam at {format_time(m.time)} (frame {m.frame}){moved}</title></line>')
        return out

    def drifts(self, link: Callable[[float], str] | None) -> list[str]:
        out = []
        for d in self.c.drifts:
            px, e = self.x(d.time), html.escape
            marker = (f'<line x1="{px:.1f}" x2="{px:.1f}" y1="2" y2="{self.y1}" stroke="#d13b3b" stroke-width="2"/>'
                      f'<path d="M{px - 6:.1f},{self.y0 - 2} L{px + 6:.1f},{self.y0 - 2} L{px:.1f},{self.y0 + 8} Z" fill="#d13b3b"/>'
                      f'<title>drift at {format_time(d.time)}: {e(TIER_WORDS[d.before])} to {e(TIER_WORDS[d.after])}</title>')
            out.append(f'<a href="{e(link(d.time))}" class="drift">{marker}</a>' if link else f'<g class="drift">{marker}</g>')
        return out


def plot_svg(c: Comparison, link: Callable[[float], str] | None = None, size: PlotSize = PlotSize()) -> str:
    """The similarity of the reference's head over time, as an SVG: the tier of each segment as a band at the top (and
    whether the face showed), identity and head scores (rings: a head without a face), the bars they are held to, cuts
    as grey lines, seams between generated chunks as orange dashes, drift events as red markers (links to
    `link(time)` where given)."""
    plot, w, h = _Plot(c, size), size.width, size.height
    head = [f'<svg xmlns="http://www.w3.org/2000/svg" class="compare-plot" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
            f'aria-label="similarity to {html.escape(c.reference.name)} over time">', f'<rect x="0" y="0" width="{w}" height="{h}" fill="#ffffff"/>']
    return "\n".join(head + plot.bands() + plot.axes() + plot.seams() + plot.scores() + plot.drifts(link) + ["</svg>"])


# ----- pictures of the worst frames -----------------------------------------------------------------
def worst_frames(c: Comparison, n: int = WORST_FRAMES, apart_s: float = 0.5) -> list[Frame]:
    """The head frames that look least like the reference (lowest tier, then lowest score), at least `apart_s` apart."""
    def score(f: Frame) -> float:
        v = f.identity if f.identity is not None else f.head
        return 1.0 if v is None else v

    chosen: list[Frame] = []
    frames = (f for f in c.frames if f.tier in RANK and f.box is not None)
    for f in sorted(frames, key=lambda f: (RANK[f.tier], f.carried, score(f), f.time)):  # a carried tier is no evidence of its own
        if all(abs(f.time - g.time) >= apart_s for g in chosen):
            chosen.append(f)
        if len(chosen) >= n:
            break
    return sorted(chosen, key=lambda f: f.time)


def frame_picture(c: Comparison, f: Frame, max_side: int = 360) -> bytes | None:
    """A frame of the video with the reference's head boxed (JPEG), or None when the video cannot be read again."""
    try:
        rgb = frame_at(Path(c.video), f.time + 1e-4)
    except (MediaError, OSError):
        return None
    scale = rgb.shape[1] / c.size[0] if c.size[0] else 1.0
    return encode_jpeg(draw_box(rgb, tuple(v * scale for v in f.box), max_side))


# ----- HTML and CSV ------------------------------------------------------------------------------------
_TEMPLATES = jinja2.Environment(loader=jinja2.PackageLoader("headsearch.compare", "templates"), autoescape=True,
                                undefined=jinja2.StrictUndefined)


def report_name(c: Comparison, taken: set[str]) -> str:
    """A file name for a comparison's page, unique among `taken`."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{Path(c.video).stem}--{c.reference.name}")[:80] or "video"
    name, n = f"{stem}.html", 2
    while name in taken:
        name, n = f"{stem}-{n}.html", n + 1
    taken.add(name)
    return name


def leaderboard(comparisons: Sequence[Comparison]) -> list[Comparison]:
    """Comparisons, most consistent first: same-person share, then same-look share, then fewer drift events."""
    return sorted(comparisons, key=lambda c: (-c.same_person_share, -c.share("same_look", of_heads=True), len(c.drifts), c.video))


def leaderboard_rows(comparisons: Sequence[Comparison], pages: dict[int, str] | None = None) -> list[dict]:
    rows = []
    for rank, c in enumerate(leaderboard(comparisons), 1):
        s = c.summary()
        rows.append({"rank": rank, "video": c.video, "reference": c.reference.name, "verdict": c.verdict,
                     "same_person_share": s["same_person_share"], "same_look_share": s["same_look_share"],
                     "other_look_share": s["shares"]["other_look"], "other_person_share": s["shares"]["other_person"],
                     "no_head_share": s["shares"]["no_head"], "drifts": s["drifts"], "facesim": s["facesim"],
                     "face_frames": s["face_frames"], "faceless_head_frames": s["faceless_head_frames"], "frames": s["frames"],
                     "duration": s["duration"], "report": (pages or {}).get(id(c), "")})
    return rows


def leaderboard_csv(comparisons: Sequence[Comparison], pages: dict[int, str] | None = None) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=LEADERBOARD_FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in leaderboard_rows(comparisons, pages):
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return buf.getvalue()


def page_data(c: Comparison, pictures: bool = True) -> dict:
    """What a comparison's page shows (the report's page and the web app's)."""
    s = c.summary()
    worst = worst_frames(c) if pictures else []
    return {"video": c.video, "name": Path(c.video).name, "reference": c.reference.to_dict(), "verdict": c.verdict,
            "verdict_words": VERDICT_WORDS[c.verdict], "summary": s, "colours": TIER_COLOURS, "tier_words": TIER_WORDS,
            "segments": [{**seg.to_dict(), "start_text": format_time(seg.start), "end_text": format_time(seg.end),
                          "shots_text": _shots_text(seg.to_dict()["shots"])} for seg in c.segments],
            "drifts": [{**d.to_dict(), "time_text": format_time(d.time)} for d in c.drifts],
            "worst": [{"time": f.time, "time_text": format_time(f.time), "tier": f.tier, "identity": f.identity, "head": f.head,
                       "face": f.face, "frame": f} for f in worst],
            "same_person": SAME_PERSON, "warning": c.warning, "coverage_line": coverage_line(c), "views_line": views_line(c),
            "seams": None if c.seams is None else [{**m.to_dict(), "time_text": format_time(m.time)} for m in c.seams]}


def _shots_text(shots: list[int]) -> str:
    """Shots as people count them, from 1."""
    if not shots:
        return ""
    return str(shots[0] + 1) if shots[0] == shots[-1] else f"{shots[0] + 1}-{shots[-1] + 1}"


def _data_uri(jpeg: bytes | None) -> str | None:
    import base64

    return None if jpeg is None else "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")


def write_report(folder: Path, comparisons: Sequence[Comparison], failed: Sequence[tuple[str, str]] = ()) -> Path:
    """An HTML page per comparison in `folder`, and, for several, `index.html` (the leaderboard) and `leaderboard.csv`;
    the page to open first. Pictures are inside the pages (one file each, to copy or mail)."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise HeadsearchError(f"{folder}: cannot make the report folder ({e.strerror or e})") from e
    taken: set[str] = {"index.html"}
    pages: dict[int, str] = {}
    many = len(comparisons) + len(failed) > 1
    for c in comparisons:
        name = pages[id(c)] = report_name(c, taken)
        data = page_data(c)
        for w in data["worst"]:
            w["picture"] = _data_uri(frame_picture(c, w.pop("frame")))
        html_text = _TEMPLATES.get_template("video.html").render(
            **data, plot=plot_svg(c), reference_picture=_data_uri(c.reference.picture), index="index.html" if many else None)
        write_bytes_atomic(folder / name, html_text.encode("utf-8"))
    if not many:
        return folder / pages[id(comparisons[0])] if comparisons else folder
    rows = leaderboard_rows(comparisons, pages)
    write_bytes_atomic(folder / "leaderboard.csv", leaderboard_csv(comparisons, pages).encode("utf-8"))
    index = _TEMPLATES.get_template("leaderboard.html").render(rows=rows, failed=list(failed), colours=TIER_COLOURS,
                                                               verdict_words=VERDICT_WORDS)
    write_bytes_atomic(folder / "index.html", index.encode("utf-8"))
    return folder / "index.html"

"""`headsearch redact`: a video written again with chosen people's heads hidden in every frame (the whole head: hair
and the back of it, not only the face), with an audit trail of every box and a contact sheet to check.

Whom (`Whom`): one person (a person of a library, by name or id, or reference photos of one person), everyone but some
people, or everyone. The heads come from the library's analysis where the video is indexed there and unchanged (the
same content fingerprint), else from analysing it as `index` does (shots, heads found by their faces or by person
keypoints, tracked through profiles and turned-away frames). A track is that person when the one scorer of a track
against a query (`headsearch.evaluation.track_scores`, as search scores a photo's hits) judges it the same person at the
model's calibrated bars (`thresholds.json`): every track of the person's template (the reference photos averaged, or the
library person's reference photos or main look); where the video is indexed, the person's own tracks count too. Then
`indexer.redact_frames` finds each chosen head in every frame and writes the video.

Where every head is hidden but those identified (--everyone, --all-except), a head missed is a leak and a false one a
patch blurred for nothing: a new analysis looks for small and faint faces too (`EveryFaceDetector`), and keeps the
tracks its evidence rule drops (said in the audit trail). A library's analysis is read as it is.

`Redactor` loads the model and detector once and serves many videos (the CLI, later the web app and bench); `redact` is
the one-call form. Nothing is stored; the source is never written to: the output is written beside its name and renamed
into place at the end, with its audit trail (`OUT.redactions.json`), so a run killed half way leaves no file under the
output's name.
"""
from __future__ import annotations

import contextlib
import datetime
import logging
import os
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from headsearch.basics.errors import HeadsearchError, MediaError, NoHeadFound
from headsearch.basics.failures import file_failures
from headsearch.basics.files import process_alive
from headsearch.basics.media import file_stamp, media_kind
from headsearch.basics.settings import IndexSettings, MediaLimits
from headsearch.basics.text import counted
from headsearch.basics.timeline import probe_video
from headsearch.compare.reference import Reference, ReferenceHead, person_heads, photo_files
from headsearch.detection.faces import FaceDetector
from headsearch.embedding.photo_heads import PhotoEmbedder
from headsearch.evaluation.thresholds import Thresholds, thresholds_for
from headsearch.evaluation.track_scores import PhotoQuery, TrackRows, score_track
from headsearch.models.registry import find_spec
from headsearch.people.listing import find_person
from headsearch.store.library import Library
from indexer.analysis import analyse_file
from indexer.decode import check_video_header
from indexer.redact_frames import (
    REFINE_SIDE,
    STYLES,
    AuditTrail,
    FrameProgress,
    HeadBoxes,
    HeadPath,
    PreviewSheet,
    Written,
    covered_frames,
    preview_frames,
    write_hidden,
)
from indexer.rejoin import joined_why, with_joins
from schemas.records import Box, FaceDetection, FileResult, HeadTrack, MediaKind, Tier, VectorKind

log = logging.getLogger(__name__)

DEFAULT_MARGIN = 0.2  # the head box grows by a fifth of its size (a tenth on each side): room for a head that moves between frames
AUDIT_SUFFIX = ".redactions.json"  # the audit trail: OUT + this
PREVIEW_SUFFIX = ".redactions.png"  # the contact sheet: DIR / (OUT's name + this)
OUTPUT_SUFFIXES = (".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".ts", ".mpg", ".mpeg", ".flv")
AUDIT_FORMAT = "headsearch-redactions/1"
ONE_PER_TRACK_S = 1e9  # `embed_every_s` where nobody is identified (--everyone): a track embeds one sighting
# Where every head is hidden (--everyone, --all-except), a head the analysis misses is a leak, and a false one only a
# patch blurred for nothing: the analysis' detector looks at each sampled frame enlarged too, for the small faces the
# index's look misses (RetinaFace finds a face of some 40 pixels and up at its scale; the index's detector sees a 1080p
# frame at a third, where a 20-40 pixel crowd face is too small), weaker and smaller ones, and the tracks its evidence
# rule would drop are hidden too. On the crowd of
# facenet-pytorch's video.mp4 (1080p): a man's profile some 35 x 50 pixels, seen at 0.62 with the frame enlarged twice and
# not at all at the index's scale, and a face the index's tracker lost at its last sample, found at 0.81.
EVERY_HEAD_ZOOM = 2.0  # the decoded frame (at most 1280 pixels across) is enlarged this much...
EVERY_HEAD_SIDE = 2560  # ...to at most this long side
EVERY_HEAD_SCORE = 0.5  # faces scored from this (the index: 0.7)
EVERY_HEAD_MIN_FACE_PX = 8.0  # ...and from this size in decoded pixels (16 at the detector's scale: its smallest anchor)
EVERY_HEAD_SMALL_FACE_PX = 64.0  # ...up to this size (decoded pixels): the larger ones are the index's detector's to find


@dataclass(frozen=True)
class Whom:
    """Whose heads are hidden: one person (`person`: a person of the library, by name or id; or `photos`: reference
    photos of one person), everyone but some people (`spare`: each a person of the library or a photo of one), or
    `everyone`."""

    person: str | None = None
    photos: tuple[Path, ...] = ()
    spare: tuple[str, ...] = ()
    everyone: bool = False

    def __post_init__(self) -> None:
        chosen = sum((self.person is not None, bool(self.photos), bool(self.spare), self.everyone))
        if chosen != 1:
            raise HeadsearchError("say whom to redact: a person (--person NAME or --ref PHOTO), everyone but some people "
                                  "(--all-except NAME|PHOTO), or --everyone" if chosen == 0 else
                                  "--person, --ref, --all-except and --everyone exclude each other: give one")

    @property
    def needs_library(self) -> bool:
        return self.person is not None or any(not _is_photo(s) for s in self.spare)

    def to_dict(self) -> dict:
        if self.everyone:
            return {"everyone": True}
        if self.spare:
            return {"all_except": list(self.spare)}
        return {"person": self.person} if self.person is not None else {"photos": [str(p) for p in self.photos]}


def _is_photo(value: str | Path) -> bool:
    """An --all-except value names a photo (a file there, or a photo's name) rather than a person of the library."""
    return Path(value).is_file() or media_kind(value) == MediaKind.IMAGE


@dataclass(frozen=True)
class Target:
    """A person to find among the tracks: a template of vectors, and where they come from."""

    name: str
    reference: Reference
    person_id: int | None = None  # a person of the library: its tracks there count as it


@dataclass(frozen=True)
class SeenTrack:
    """A head track of the analysis a redaction works from."""

    key: int  # its id in the library, or its number in this analysis (from 1)
    shot: int  # its shot's index
    sightings: tuple[tuple[int, Box], ...]  # (frame index, head box in the analysis' pixels), in time order
    rows: TrackRows  # its vectors, as the scorer reads a track (kind -> keys, faces, rows)
    start: float
    end: float
    doubt: str | None = None  # why the analysis' evidence rule would drop it (None: a confirmed head)
    joined_to: int | None = None  # the key of the first track of its person in its shot, where it was joined (`indexer.rejoin`)
    join_cue: str | None = None


@dataclass
class VideoHeads:
    """The heads of one video, from the library's analysis or a new one: tracks, shots (frame ranges), sampled frames."""

    path: Path
    fingerprint: str
    size: tuple[int, int]  # (width, height) of the frames the boxes are in
    frames: int
    fps: float
    shots: dict[int, tuple[int, int]]  # shot index -> (first frame, last frame)
    tracks: list[SeenTrack]
    samples: list[int] | None  # frame indexes of the sampled frames (None: not kept; `period` then)
    period: int  # frames between samples, where `samples` is None
    source: str  # where the analysis comes from, in words
    members: dict[int, int] = field(default_factory=dict)  # library track id -> person id
    seconds: float = 0.0  # how long finding them took


@dataclass(frozen=True)
class Chosen:
    """A track whose head is hidden: who it is and why it was chosen, in words."""

    track: SeenTrack
    who: str
    why: str

    def to_dict(self, heads: VideoHeads) -> dict:
        first, last = _covered(self.track, heads)
        return {"track": self.track.key, "who": self.who, "why": self.why, "shot": self.track.shot,
                "start": round(self.track.start, 3), "end": round(self.track.end, 3), "first_frame": first, "last_frame": last,
                "sightings": len(self.track.sightings)}


@dataclass
class RedactSummary:
    """What a redaction wrote."""

    source: Path
    out: Path
    audit: Path
    preview: Path | None
    chosen: list[Chosen]
    written: Written
    analysis: str
    seconds: float  # wall time, the analysis included
    analysis_seconds: float  # ...of which finding the heads (the library's analysis read, or a new one)
    video_seconds: float  # how long the video plays
    notes: list[str] = field(default_factory=list)

    @property
    def speed(self) -> float:
        """Times real time."""
        return self.video_seconds / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        who = Counter(c.who for c in self.chosen)
        people = ", ".join(f"{w} ({counted(n, 'track')})" for w, n in who.most_common(6)) + (", ..." if len(who) > 6 else "")
        boxes = self.written.boxes
        hidden = (f"{boxes:,} box{'es' if boxes != 1 else ''} hidden in {self.written.frames_hidden:,} of "
                  f"{counted(self.written.frames, 'frame')}" + (f": {people}" if people else ""))
        if not self.chosen:
            hidden = f"nobody to hide in {counted(self.written.frames, 'frame')} (written unchanged, encoded again)"
        return f"wrote {self.out}: {hidden}; {self.video_seconds:.1f} s of video in {self.seconds:.1f} s ({self.speed:.2f}x real time)"


class Redactor:
    """The model, detector and bars a redaction runs with (loaded once, for many videos), and a library where one is
    named (its analyses and its people)."""

    def __init__(self, photos: PhotoEmbedder, library: Library | None = None, settings: IndexSettings | None = None):
        self.photos = photos
        self.library = library
        self.settings = settings or IndexSettings.from_env()
        spec = find_spec(photos.embedder.describe())
        self.appearance_dims = spec.appearance_dims if spec is not None else 0
        self._thresholds: Thresholds | None = None
        # The detector that looks again around a head between sampled frames: small copies, never enlarged.
        self.refiner = FaceDetector(self.settings.face_score_threshold, REFINE_SIDE, 1, self.settings.min_face_px)
        self._every_face: EveryFaceDetector | None = None  # made on the first analysis that hides every head

    @classmethod
    def open(cls, library: Path | None = None, model: str | None = None, settings: IndexSettings | None = None) -> Redactor:
        """With a library (its model, analyses and people), or without (`model`, default: the default model)."""
        settings = settings or IndexSettings.from_env()
        lib = Library.open(library) if library is not None else None
        photos = PhotoEmbedder(model, lib.root if lib is not None else None, detector=FaceDetector.from_settings(settings))
        photos.load()
        return cls(photos, lib, settings)

    @property
    def thresholds(self) -> Thresholds:
        """The bars a track is judged the same person by: the library's own, else the model's; refused without."""
        if self._thresholds is None:
            info = self.photos.embedder.describe()
            found = thresholds_for(self.library.root if self.library is not None else None, info)
            if found is None:
                raise HeadsearchError(f"no thresholds for {info.label()}: redact judges who is who by calibrated bars (`headsearch "
                                      "bench accuracy SET --calibrate 1e-3 --thresholds-out FILE` makes them for a model file); "
                                      "--everyone needs none")
            self._thresholds = found
        return self._thresholds

    # ----- whom ----------------------------------------------------------------------------------
    def targets(self, whom: Whom) -> list[Target]:
        """The people named: the one to hide, or those to spare; refused in one line when a photo shows no head or
        several, or a person is not in the library. None for `everyone`."""
        if whom.everyone:
            return []
        if whom.photos:
            return [self._photo_target(whom.photos)]
        if whom.person is not None:
            return [self._person_target(whom.person)]
        return [self._photo_target([Path(s)]) if _is_photo(s) else self._person_target(s) for s in whom.spare]

    def _photo_target(self, photos: Sequence[Path]) -> Target:
        heads = []
        for photo in photo_files([Path(p) for p in photos]):
            try:
                found = self.photos.heads(photo, str(photo), all_heads=True)
            except NoHeadFound as e:
                raise NoHeadFound(f"{photo}: no head found in this photo: give a photo of the person's head") from e
            if len(found) > 1:
                raise HeadsearchError(f"{photo}: {len(found)} heads in this photo: give a photo of the one person (a crop of their head)")
            heads.append(ReferenceHead(found[0].vectors, found[0].head.face_visible, None, found[0].head.box.area))
        name = Path(photos[0]).stem
        _ = self.thresholds  # refused now, before any video is read, when there are no bars
        return Target(name, Reference.of(name, heads, [str(p) for p in photos]))

    def _person_target(self, key: str) -> Target:
        if self.library is None:
            raise HeadsearchError(f"--person {key}: a person of a library needs one (--library, or index the videos first)")
        person = find_person(self.library, key)
        name, heads, said = person_heads(self.library, key)
        _ = self.thresholds
        return Target(name, Reference.of(name, heads, [said]), person.id)

    # ----- the heads -----------------------------------------------------------------------------
    def heads(self, video: Path, progress: FrameProgress | None = None, identify: bool = True, every_head: bool = False) -> VideoHeads:
        """The video's heads: the library's analysis where it holds this video unchanged, else a new analysis (where no
        one is to be identified, `identify` False, each track embeds one sighting only). `every_head` (every head is
        hidden but those identified: --everyone, --all-except): a new analysis looks for small and faint faces too
        (`EveryFaceDetector`; the coarse pass for shots of large faces is off) and keeps the tracks its evidence rule
        drops (`SeenTrack.doubt` says why)."""
        stamp = file_stamp(video)
        if self.library is not None:
            found = library_heads(self.library, video, stamp.fingerprint)
            if found is not None:
                return found
        settings = self.settings if identify else replace(self.settings, embed_every_s=ONE_PER_TRACK_S)
        detector = self.photos.detector
        if every_head:
            if self._every_face is None:
                self._every_face = EveryFaceDetector(self.settings, self.photos.detector)
            # Enlarged throughout: the coarse pass for shots of large faces would look past the small ones.
            settings, detector = replace(settings, detect_coarse_side=0), self._every_face
        result = analyse_file(video, settings, detector, self.photos.embedder, stamp=stamp, progress=progress)
        if result.kind != MediaKind.VIDEO:
            raise MediaError(f"{video}: a photo, not a video")
        return analysed_heads(video, result, unconfirmed=every_head)

    def choose(self, heads: VideoHeads, whom: Whom, targets: Sequence[Target]) -> list[Chosen]:
        """The tracks whose heads are hidden, each with who it is and why."""
        if whom.everyone:
            return [Chosen(tr, f"track {tr.key}", _unconfirmed("everyone", tr)) for tr in heads.tracks]
        joins = {tr.key: tr.joined_to for tr in heads.tracks}  # the person's other pieces in a shot count as them
        if whom.spare:
            out = []
            spared = with_joins((tr.key for tr in heads.tracks if any(self._is(tr, t, heads) for t in targets)), joins)
            for tr in heads.tracks:
                if tr.key not in spared:
                    out.append(Chosen(tr, f"track {tr.key}", _unconfirmed(f"not one of the spared ({', '.join(t.name for t in targets)})", tr)))
            return out
        target = targets[0]
        found = {tr.key: why for tr in heads.tracks if (why := self._is(tr, target, heads))}
        chosen = with_joins(found, joins)
        return [Chosen(tr, target.name, found.get(tr.key) or joined_why(tr.join_cue, tr.key, joins, found))
                for tr in heads.tracks if tr.key in chosen]

    def _is(self, track: SeenTrack, target: Target, heads: VideoHeads) -> str | None:
        """Why a track is the target's person, in words (None: it is not)."""
        if target.person_id is not None and heads.members.get(track.key) == target.person_id:
            return f"a track of person {target.person_id} in the library"
        if not track.rows:
            return None
        ref = target.reference
        dims = self.appearance_dims if VectorKind.HEAD in ref.vectors else 0
        query = PhotoQuery(ref.vectors.get(VectorKind.ID), ref.vectors.get(VectorKind.HEAD), dims)
        scored = score_track(track.rows, query, self.thresholds)
        if scored.tier is None or scored.tier == Tier.OTHER_PERSON:
            return None
        if scored.id_score is not None and scored.id_score > self.thresholds.identity:
            return f"same person: identity {scored.id_score:.3f} > {self.thresholds.identity:.3f}"
        if scored.matched_without_face:
            return f"same person by the look of the head: {scored.appearance_score:.3f} > {self.thresholds.appearance:.3f}"
        return f"same person: head {scored.head_score:.3f} > {self.thresholds.head_identity:.3f}"

    # ----- the whole run -------------------------------------------------------------------------
    def redact(self, video: Path, whom: Whom, out: Path, style: str = "blur", margin: float = DEFAULT_MARGIN,
               preview: Path | None = None, progress: FrameProgress | None = None, targets: Sequence[Target] | None = None) -> RedactSummary:
        """Hide `whom`'s heads in every frame of `video`, written to `out` with its audit trail (and a contact sheet in
        the folder `preview`); `progress` (tqdm's interface) follows the analysis, then the writing. `targets`: `whom`'s
        people made already (`targets(whom)`), for many videos."""
        t0 = time.perf_counter()
        video, out = Path(video), Path(out)
        check_paths(video, out, style, margin)
        check_readable(video)
        targets = self.targets(whom) if targets is None else targets
        # Whatever nobody foresaw in a file is one line, its traceback in errors.log (the library's, else a private one).
        with file_failures(video, self.library.root if self.library is not None else None):
            _describe(progress, "analysing")
            t1 = time.perf_counter()
            heads = self.heads(video, progress, identify=not whom.everyone, every_head=whom.everyone or bool(whom.spare))
            heads.seconds = time.perf_counter() - t1
            chosen = self.choose(heads, whom, targets)
            _describe(progress, "redacting")
            return self._write(heads, chosen, whom, out, style, margin, preview, progress, t0)

    def _write(self, heads: VideoHeads, chosen: list[Chosen], whom: Whom, out: Path, style: str, margin: float,
               preview: Path | None, progress: FrameProgress | None, t0: float) -> RedactSummary:
        paths = [HeadPath(c.track.key, c.who, c.track.sightings, *_covered(c.track, heads)) for c in chosen]
        audit = audit_path(out)
        sheet_path = Path(preview) / (out.name + PREVIEW_SUFFIX) if preview is not None else None
        if sheet_path is not None:
            sheet_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = partial_path(out)
        _remove_stale(out)
        head = {"format": AUDIT_FORMAT, "source": str(heads.path.resolve()), "source_fingerprint": heads.fingerprint,
                "output": str(out.resolve()),
                "made": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "whom": whom.to_dict(), "style": style,
                "margin": margin, "analysis": heads.source,
                "boxes_in": "pixels of the upright picture (x1, y1, x2, y2), grown by the margin and clipped to the frame",
                "tracks": [c.to_dict(heads) for c in chosen]}
        sheet = PreviewSheet(set(preview_frames(paths, heads.frames)), f"{heads.path.name} -> {out.name}: {style}, "
                             f"{counted(len(chosen), 'track')} hidden") if sheet_path is not None else None
        scale = (1.0, 1.0)

        def boxes_of(turns: int, stored: tuple[int, int]) -> HeadBoxes:
            nonlocal scale
            upright = stored if turns % 2 == 0 else (stored[1], stored[0])
            scale = (upright[0] / max(heads.size[0], 1), upright[1] / max(heads.size[1], 1))
            return HeadBoxes(paths, scale, turns, stored, margin, self.settings.follow_min_score, self.refiner, self.settings.track_iou)

        trail = AuditTrail(audit, head)
        try:
            written = write_hidden(heads.path, tmp, boxes_of, style, trail, sheet, progress, heads.frames or None)
            notes = [f"left out {s}" for s in written.left_out]
            if written.stopped_at is not None:
                notes.append(f"{heads.path}: damaged: decoding stopped at frame {written.stopped_at}; the output ends there")
            trail.close({"frames_written": written.frames, "frames_with_boxes": written.frames_hidden, "boxes": written.boxes,
                         "encoder": written.encoder, "streams_copied": written.copied, "streams_left_out": written.left_out,
                         "notes": notes})
            if sheet is not None and sheet_path is not None:
                sheet.write(sheet_path)
            trail.commit()
            os.replace(tmp, out)
        except BaseException:
            trail.discard()
            tmp.unlink(missing_ok=True)
            raise
        for note in notes:
            log.warning("%s", note)
        return RedactSummary(heads.path, out, audit, sheet_path, chosen, written, heads.source, time.perf_counter() - t0, heads.seconds,
                             heads.frames / heads.fps if heads.fps else 0.0, notes)


class EveryFaceDetector(FaceDetector):
    """The face detector of an analysis that hides every head: the index's detector's faces, and the small ones it cannot
    see, from a second look at the frame enlarged EVERY_HEAD_ZOOM times (at most EVERY_HEAD_SIDE pixels across), faces
    from EVERY_HEAD_SCORE and EVERY_HEAD_MIN_FACE_PX up to EVERY_HEAD_SMALL_FACE_PX. Large faces come from the index's
    look alone: enlarged, a close-up's face is past the detector's largest anchors, and it gave boxes of the whole frame
    and several tracks on one face (on the 10-minute video: 438 tracks and 90,482 boxes, against the index's 121)."""

    def __init__(self, settings: IndexSettings, usual: FaceDetector):
        super().__init__(EVERY_HEAD_SCORE, EVERY_HEAD_SIDE, settings.detect_min_side, EVERY_HEAD_MIN_FACE_PX)
        self.usual = usual  # the index's look (the redactor's own detector)

    def _load(self):
        return self.usual._load()  # the same network: its session, not a second one

    def scale_for(self, width: int, height: int, max_side: int | None = None) -> float:
        return max(min(EVERY_HEAD_ZOOM, self.max_side / max(width, height, 1)), super().scale_for(width, height))

    def detect(self, rgb: np.ndarray, max_side: int | None = None) -> list[FaceDetection]:
        usual = self.usual.detect(rgb, max_side) if max_side else self.usual.detect(rgb)
        small = [f for f in super().detect(rgb) if max(f.box.width, f.box.height) < EVERY_HEAD_SMALL_FACE_PX
                 and not any(u.box.x1 <= f.box.center[0] <= u.box.x2 and u.box.y1 <= f.box.center[1] <= u.box.y2 for u in usual)]
        return sorted(usual + small, key=lambda d: -d.score)


def _unconfirmed(why: str, track: SeenTrack) -> str:
    return why if track.doubt is None else f"{why}; unconfirmed, hidden all the same: {track.doubt}"


def redact(video: Path, whom: Whom, out: Path, style: str = "blur", margin: float = DEFAULT_MARGIN, preview: Path | None = None,
           library: Path | None = None, model: str | None = None, progress: FrameProgress | None = None,
           settings: IndexSettings | None = None) -> RedactSummary:
    """Hide `whom`'s heads in every frame of `video` into `out` (see `Redactor.redact`): the paths are checked and the video
    opened before the model loads; a library is opened where one is named or a person of one is asked for."""
    check_paths(Path(video), Path(out), style, margin)
    if whom.needs_library and library is None:
        raise HeadsearchError("a person of a library needs --library (or $HEADSEARCH_LIBRARY)")
    check_readable(Path(video))
    redactor = Redactor.open(library, model, settings)
    return redactor.redact(Path(video), whom, Path(out), style, margin, preview, progress)


# ----- paths ---------------------------------------------------------------------------------------
def audit_path(out: Path) -> Path:
    """The audit trail of an output: OUT.redactions.json beside it."""
    return Path(out).with_name(Path(out).name + AUDIT_SUFFIX)


def partial_path(out: Path) -> Path:
    """Where an output is written until it is complete: beside it, hidden, named by this process (same suffix, which
    says the kind of file)."""
    return Path(out).with_name(f".{Path(out).stem}.redacting-{os.getpid()}{Path(out).suffix}")


def _remove_stale(out: Path) -> None:
    """Partial outputs (and audit trails) of runs killed before they finished: their process is gone."""
    patterns = (re.compile(re.escape(f".{out.stem}.redacting-") + r"(\d+)" + re.escape(out.suffix) + "$"),
                re.compile(re.escape(f".{audit_path(out).name}.") + r"(\d+)\.tmp$"))
    with contextlib.suppress(OSError):
        for p in out.parent.iterdir():
            m = next((m for pattern in patterns if (m := pattern.match(p.name))), None)
            if m and int(m.group(1)) != os.getpid() and not process_alive(int(m.group(1))):
                p.unlink(missing_ok=True)



def check_paths(video: Path, out: Path, style: str = "blur", margin: float = DEFAULT_MARGIN) -> None:
    """Refuse, in one line, what cannot be done: a missing video, an output that is the source (it is never
    overwritten), in a missing folder, or not named as a video; an unknown style or a negative margin."""
    if style not in STYLES:
        raise HeadsearchError(f"--style {style}: one of {', '.join(STYLES)}")
    if not (0.0 <= margin <= 4.0):
        raise HeadsearchError(f"--margin {margin}: a share of the head box from 0 to 4 (0.2: a fifth of its size)")
    if not video.exists():
        raise MediaError(f"{video}: no such file")
    if not video.is_file():
        raise MediaError(f"{video}: not a file")
    if media_kind(video) != MediaKind.VIDEO:
        raise MediaError(f"{video}: a photo, not a video")
    if out.resolve() == video.resolve() or (out.exists() and os.path.samefile(out, video)):
        raise HeadsearchError(f"--out {out}: that is the source video; redact never overwrites its source (give another file)")
    if not out.parent.is_dir():
        raise HeadsearchError(f"--out {out}: no folder {out.parent} (redact makes no folders for its output)")
    if out.is_dir():
        raise HeadsearchError(f"--out {out}: a folder; give a file name")
    if out.suffix.lower() not in OUTPUT_SUFFIXES:
        raise HeadsearchError(f"--out {out}: name it as a video ({', '.join(OUTPUT_SUFFIXES[:5])}...)")


def check_readable(video: Path) -> None:
    """Refuse, before any model loads, a video whose header is damaged or whose first frame PyAV (which writes the
    output) cannot decode."""
    check_video_header(video, MediaLimits.from_env())
    if probe_video(video) is None:
        raise MediaError(f"{video}: not a readable video")


def _describe(progress: FrameProgress | None, what: str) -> None:
    describe = getattr(progress, "set_description", None)
    if describe is not None:
        describe(what)


# ----- the analysis, from a new one or the library's ------------------------------------------------
def analysed_heads(path: Path, result: FileResult, unconfirmed: bool = False) -> VideoHeads:
    """A new analysis' heads; `unconfirmed`: the tracks its evidence rule dropped too (after the others, with why)."""
    tracks = []
    kept: list[tuple[HeadTrack, str | None]] = [(tr, None) for tr in result.tracks]
    for n, (tr, doubt) in enumerate(kept + (list(result.dropped_tracks) if unconfirmed else []), 1):
        obs = tr.observations
        rows: dict[VectorKind, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for kind in VectorKind:
            have = [(i, o) for i, o in enumerate(obs) if kind in o.embeddings]
            if have:
                rows[kind] = (np.array([i for i, _ in have], np.int64), np.array([o.face_visible for _, o in have], bool),
                              np.stack([o.embeddings[kind] for _, o in have]).astype(np.float32))
        join = tr.join if doubt is None else None  # kept tracks come first: track i is number i + 1
        tracks.append(SeenTrack(n, tr.shot_index, tuple((o.frame_index, o.head) for o in obs), rows, tr.start, tr.end, doubt,
                                None if join is None else join.to + 1, None if join is None else join.cue))
    samples = sorted(i for i, _ in result.samples)
    return VideoHeads(path, result.stamp.fingerprint, (result.width, result.height), result.frames_decoded, result.fps,
                      {s.index: (s.start_frame, s.end_frame) for s in result.shots}, tracks, samples, 1,
                      f"analysed now, as `index` analyses it ({result.frames_sampled:,} of {result.frames_decoded:,} frames sampled)")


def library_heads(library: Library, video: Path, fingerprint: str) -> VideoHeads | None:
    """The library's analysis of this video (a file of the same content, this path first), or None where it has none."""
    with library.browsing() as reader:
        files = [f for f in reader.videos() if f.fingerprint == fingerprint and f.kind == str(MediaKind.VIDEO)]
        if not files:
            return None
        here = str(video.resolve())
        row = reader.video(min(files, key=lambda f: (f.path != here, f.path)).id)
        shot_rows = reader.shots(row.id)
        shot_of = {s.id: s.shot_index for s in shot_rows}
        track_rows = reader.tracks(video_id=row.id)
        sightings = {tr.id: reader.sightings_of_track(tr.id) for tr in track_rows}
    with library.reading() as reader:
        vectors = reader.tracks_vectors([tr.id for tr in track_rows])
    with library.people_reading() as people:
        members = {tr: pid for tr, pid in people.memberships().items() if tr in sightings}
    tracks = []
    for tr in track_rows:
        seen = tuple((s.frame_index, Box(s.x1, s.y1, s.x2, s.y2)) for s in sightings[tr.id])
        if seen:
            kinds = vectors[tr.id].kinds if tr.id in vectors else {}
            tracks.append(SeenTrack(tr.id, shot_of.get(tr.shot_id, 0), seen, kinds, tr.start_time, tr.end_time,
                                    joined_to=tr.joined_to, join_cue=tr.join_cue))
    gaps = [b[0] - a[0] for t in tracks for a, b in zip(t.sightings, t.sightings[1:], strict=False) if b[0] > a[0]]
    period = int(np.median(gaps)) if gaps else max(1, round((row.fps or 25.0) / IndexSettings.sample_fps))
    return VideoHeads(video, fingerprint, (row.width, row.height), row.frames_decoded, row.fps,
                      {s.shot_index: (s.start_frame, s.end_frame) for s in shot_rows}, tracks, None, period,
                      f"the library {library.root.resolve()} (indexed {datetime.datetime.fromtimestamp(row.indexed_at).isoformat(timespec='seconds')})",
                      members)


def _covered(track: SeenTrack, heads: VideoHeads) -> tuple[int, int]:
    frames = [f for f, _ in track.sightings]
    shot = heads.shots.get(track.shot, (frames[0], frames[-1]))
    return covered_frames(frames, shot, heads.samples, heads.period)

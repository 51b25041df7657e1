"""`headsearch redact`: a video written again with chosen people's heads hidden in every frame (the whole head: hair
and the back of it, not only the face), with an audit trail of every box and a contact sheet to check.

Whom (`Whom`): one person (a person of a library, by name or id, or reference photos of one person), everyone but some
people, or everyone. The heads come from the library's analysis where the video is indexed there and unchanged (the
same content fingerprint), else from analysing it as `index` does (shots, heads found by their faces or by person
keypoints, tracked through profiles and turned-away frames). A track is that person when the one scorer of a track
against a query (`headsearch.evaluation.track_scores`, as search scores a photo's hits) judges it the same person at the
model's calibrated bars (`thresholds.json`): every track of the person's template (the reference photos averaged, or the
library person's reference photos or main look); where the video is indexed, the person's own tracks count too. Then
`actions.redact_frames` finds each chosen head in every frame and writes the video.

Where every head is hidden but those identified (--everyone, --all-except), a head missed is a leak and a false one a
patch blurred for nothing: a new analysis looks for small and faint faces too (`EveryFaceDetector`), and keeps the
tracks its evidence rule drops (said in the audit trail). A library's analysis is read as it is.

`Redactor` loads the model and detector once and serves many videos (the CLI, the web app and bench); `redact` is
the one action, given a request (`actions.requests.RedactRequest`, with its `Whom`). Nothing is stored; the source is
never written to: the output is written beside its name and renamed into place at the end, with its audit trail
(`OUT.redactions.json`), so a run killed half way leaves no file under the output's name.
"""
from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from actions.redact_frames import (
    REFINE_SIDE,
    AuditTrail,
    FrameProgress,
    HeadBoxes,
    HeadPath,
    PreviewSheet,
    parse_style,
    preview_frames,
    write_hidden,
)
from actions.redact_output import (
    DEFAULT_MARGIN,
    PREVIEW_SUFFIX,
    audit_path,
    check_paths,
    check_readable,
    check_source_unchanged,
    clear_after_failure,
    partial_path,
    put_in_place,
    remove_stale,
)
from actions.redact_output import OUTPUT_SUFFIXES as OUTPUT_SUFFIXES  # the web app names the kinds of output from here
from actions.redact_records import Chosen, RedactSummary, SeenTrack, VideoHeads, track_frames
from actions.redact_whom import Span, Verdict, judged_spans, sighting_faces, verdict, whom_spans
from actions.requests import RedactRequest, Whom, is_photo
from actions.session import AnalysisSession
from headsearch.basics.errors import HeadsearchError, MediaError
from headsearch.basics.failures import file_failures
from headsearch.basics.media import file_stamp, media_kind
from headsearch.basics.settings import IndexSettings
from headsearch.basics.text import counted
from headsearch.compare.reference import Reference, photo_files
from headsearch.detection.faces import FaceDetector
from headsearch.evaluation.thresholds import Thresholds
from headsearch.evaluation.track_scores import PhotoQuery, TrackRows
from headsearch.people.forgetting import analysis_lost_heads
from headsearch.people.listing import find_person
from headsearch.store.library import Library
from indexer.analysis import analyse_file
from indexer.every_head import EveryFaceDetector, with_earlier_sightings
from indexer.rejoin import join_groups, joined_why, with_joins
from schemas.records import Box, FileResult, HeadTrack, MediaKind, RedactStyle, SourceProbe, VectorKind

if TYPE_CHECKING:
    from actions.redact_verify import Verification

log = logging.getLogger(__name__)

AUDIT_FORMAT = "headsearch-redactions/1"
ONE_PER_TRACK_S = 1e9  # `embed_every_s` where nobody is identified (--everyone): a track embeds one sighting


@dataclass(frozen=True)
class Target:
    """A person to find among the tracks: a template of vectors, and where they come from."""

    name: str
    reference: Reference
    person_id: int | None = None  # a person of the library: its tracks there count as it


class Redactor:
    """A redaction's analysis session (the model, detector and bars, loaded once, for many videos, and a library where
    one is named: its analyses and its people)."""

    def __init__(self, session: AnalysisSession):
        self.session = session
        self.photos = session.photos
        self.library = session.library
        self.settings = session.settings
        self.appearance_dims = session.appearance_dims
        # The detector that looks again around a head between sampled frames: small copies, never enlarged.
        self.refiner = FaceDetector(self.settings.face_score_threshold, REFINE_SIDE, 1, self.settings.min_face_px)
        self._every_face: EveryFaceDetector | None = None  # made on the first analysis that hides every head

    @classmethod
    def open(cls, library: Path | None = None, model: str | None = None, settings: IndexSettings | None = None) -> Redactor:
        """With a library (its model, analyses and people), or without (`model`, default: the default model)."""
        session = AnalysisSession.open(library, model, settings)
        session.photos.load()
        return cls(session)

    @property
    def thresholds(self) -> Thresholds:
        """The bars a track is judged the same person by: the library's own, else the model's; refused without."""
        return self.session.bars("redact judges who is who", "; --everyone needs none")

    # ----- whom ----------------------------------------------------------------------------------
    def targets(self, whom: Whom) -> list[Target]:
        """The people named: the one to hide, or those to spare; refused in one line when a photo shows no head or
        several, or a person is not in the library. None for `everyone`."""
        if whom.everyone:
            return []
        if whom.photos:
            return [self._photo_target(whom.photos, whom.whole_image)]
        if whom.person is not None:
            return [self._person_target(whom.person)]
        return [self._photo_target([Path(s)], whom.whole_image) if is_photo(s) else self._person_target(s) for s in whom.spare]

    def _photo_target(self, photos: Sequence[Path], whole_image: bool = False) -> Target:
        reference = self.session.photo_reference(
            _reference_photos(photos), Path(photos[0]).stem, whole_image=whole_image, sources=[str(p) for p in photos],
            several=": give a photo of the one person (a crop of their head)",
            no_head=None if whole_image else (": give a photo of the person's head (a photo that is the head crop, e.g. the back of "
                                              "a head: --whole-image)"))
        _ = self.thresholds  # refused now, before any video is read, when there are no bars
        return Target(reference.name, reference)

    def _person_target(self, key: str) -> Target:
        if self.library is None:
            raise HeadsearchError(f"--person {key}: a person of a library needs one (--library, or index the videos first)")
        person = find_person(self.library, key)
        reference = self.session.person_reference(key)
        _ = self.thresholds
        return Target(reference.name, reference, person.id)

    # ----- the heads -----------------------------------------------------------------------------
    def heads(self, video: Path, progress: FrameProgress | None = None, identify: bool = True, every_head: bool = False,
              probe: SourceProbe | None = None) -> VideoHeads:
        """The video's heads: the library's analysis where it holds this video unchanged, else a new analysis (where no
        one is to be identified, `identify` False, each track embeds one sighting only). `every_head` (every head is
        hidden but those identified: --everyone, --all-except): a new analysis looks for small and faint faces too
        (`EveryFaceDetector`; the coarse pass for shots of large faces is off), keeps the tracks its evidence rule
        drops (`SeenTrack.doubt` says why) and, for --everyone, follows each track back to its shot's first sample
        (`indexer.every_head`). `probe`: the video's look where the request entered (`check_readable`), passed to the
        decoders."""
        stamp = file_stamp(video)
        # Hiding every head, a file whose analysis lost a forgotten person's tracks is analysed again (they still show in it).
        if self.library is not None and not (every_head and analysis_lost_heads(self.library, stamp.fingerprint)):
            found = library_heads(self.library, video, stamp.fingerprint)
            if found is not None:
                return found
        settings = self.settings if identify else replace(self.settings, embed_every_s=ONE_PER_TRACK_S)
        if identify and every_head:  # --all-except: each sighting judged on its own face (`actions.redact_whom`)
            settings = replace(settings, embed_every_s=0.0)
        detector = self.photos.detector
        if every_head:
            # Enlarged throughout: the coarse pass for shots of large faces would look past the small ones.
            settings, detector = replace(settings, detect_coarse_side=0), self._every_face_detector()
        result = analyse_file(video, settings, detector, self.photos.embedder, stamp=stamp, progress=progress, probe=probe)
        if result.kind != MediaKind.VIDEO:
            raise MediaError(f"{video}: a photo, not a video")
        heads = analysed_heads(video, result, unconfirmed=every_head)
        # Heads in view before any detector found them: each track followed back to its shot's first sample. Not where
        # some are spared (--all-except): a template followed back can settle on a spared face (the crowd's boy, frames
        # 40-48, under a track first found at frame 79), and nothing there says whose head it is.
        return with_earlier_sightings(heads, self.settings, probe) if every_head and not identify else heads

    def choose(self, heads: VideoHeads, whom: Whom, targets: Sequence[Target]) -> list[Chosen]:
        """The tracks whose heads are hidden, each with who it is and why (the scores it was judged by, with their bars);
        for --all-except, the tracks spared go to `heads.spared`, with why, and are followed so that no hidden box is
        drawn on their heads (`actions.redact_heads.HeadBoxes`). One rule for whom: --all-except P spares every track --ref
        P would hide (the same judgement, `_verdict`), frame by frame where its sightings' own faces say who it is there
        (`actions.redact_whom`: a track passing from P to the head behind P is hidden from there)."""
        if whom.everyone:
            return [Chosen(tr, f"track {tr.key}", _unconfirmed("everyone", tr)) for tr in heads.tracks]
        joins = {tr.key: tr.joined_to for tr in heads.tracks}  # the person's other pieces in a shot count as them
        if whom.spare:
            out, heads.spared = [], []
            covered = {tr.key: track_frames(tr, heads) for tr in heads.tracks}
            spans = {tr.key: whom_spans([(t.name, self._spans(tr, t, heads, covered[tr.key])) for t in targets], covered[tr.key])
                     for tr in heads.tracks}
            own = {k: next(by for _, _, by, _ in ss if by is not None) for k, ss in spans.items() if any(by is not None for _, _, by, _ in ss)}
            group = join_groups(joins)
            for tr in heads.tracks:
                mates = [own[k] for k in own if group.get(k, k) == group.get(tr.key, tr.key)]
                if tr.key not in own and mates:  # joined within the shot to a spared person's piece: that person, whole
                    heads.spared.append(Chosen(tr, mates[0], f"spared: {joined_why(tr.join_cue, tr.key, joins, own, tr.join_score)}", covered[tr.key]))
                    continue
                for first, last, spared_by, why in spans[tr.key]:
                    if spared_by is not None:
                        heads.spared.append(Chosen(tr, spared_by, f"spared: {why}", (first, last)))
                    else:
                        out.append(Chosen(tr, f"track {tr.key}", _unconfirmed(f"not one of the spared ({why})", tr), (first, last)))
            return out
        target = targets[0]
        found = {tr.key: why for tr in heads.tracks for is_same, why in [self._judged(tr, target, heads)] if is_same}
        chosen = with_joins(found, joins)
        # The person's own tracks reach the sampled frame after their last sighting (`actions.redact_heads`).
        return [Chosen(tr, target.name, found.get(tr.key) or joined_why(tr.join_cue, tr.key, joins, found, tr.join_score),
                       track_frames(tr, heads, to_next_sample=True))
                for tr in heads.tracks if tr.key in chosen]

    def _judged(self, track: SeenTrack, target: Target, heads: VideoHeads) -> tuple[bool, str]:
        """Whether a track is the target's person, and why, in words: the scores it was judged by, each with its bar."""
        if target.person_id is not None and heads.members.get(track.key) == target.person_id:
            return True, f"a track of person {target.person_id} in the library"
        if not track.rows:
            return False, "no vector of its head to judge it by"
        judged = self._verdict(track.rows, target)
        return judged.same, judged.why

    def _verdict(self, rows: TrackRows, target: Target) -> Verdict:
        ref = target.reference
        dims = self.appearance_dims if VectorKind.HEAD in ref.vectors else 0
        return verdict(rows, PhotoQuery(ref.vectors.get(VectorKind.ID), ref.vectors.get(VectorKind.HEAD), dims), self.thresholds)

    def _spans(self, track: SeenTrack, target: Target, heads: VideoHeads, covered: tuple[int, int]) -> list[Span]:
        """The track's frames under the target's verdicts: the track's own where the library's person holds it, else
        sighting by sighting (`actions.redact_whom.judged_spans`)."""
        whole = Verdict(*self._judged(track, target, heads))
        if target.person_id is not None and heads.members.get(track.key) == target.person_id:
            return [Span(*covered, whole)]
        return judged_spans([f for f, _ in track.sightings], track.sighting_keys, track.rows, covered, whole,
                            lambda rows: self._verdict(rows, target))

    # ----- the whole run -------------------------------------------------------------------------
    def redact(self, video: Path, whom: Whom, out: Path, style: RedactStyle | str = RedactStyle.BLUR, margin: float = DEFAULT_MARGIN,
               preview: Path | None = None, progress: FrameProgress | None = None, targets: Sequence[Target] | None = None,
               force: bool = True, allow_none: bool = True, verify: bool = False, probe: SourceProbe | None = None) -> RedactSummary:
        """Hide `whom`'s heads in every frame of `video`, written to `out` with its audit trail (and a contact sheet in
        the folder `preview`); `progress` (tqdm's interface) follows the analysis, then the writing. `targets`: `whom`'s
        people made already (`targets(whom)`), for many videos. Without `force` an output (or audit trail) there already
        is refused; without `allow_none` a person to hide whom no track matches is refused (`NobodyMatched`), and nothing
        is written. `verify`: the output is looked at again when written (`verify`, the summary's `verified`). `probe`: the
        video's look taken where the request entered (`check_readable`), else taken here; the later steps read it."""
        t0 = time.perf_counter()
        video, out = Path(video), Path(out)
        style = parse_style(style)
        check_paths(video, out, margin, force)
        probe = check_readable(video) if probe is None or Path(probe.path) != video else probe
        targets = self.targets(whom) if targets is None else targets
        # Whatever nobody foresaw in a file is one line, its traceback in errors.log (the library's, else a private one).
        with file_failures(video, self.library.root if self.library is not None else None):
            _describe(progress, "analysing")
            t1 = time.perf_counter()
            heads = self.heads(video, progress, identify=not whom.everyone, every_head=whom.everyone or bool(whom.spare), probe=probe)
            heads.seconds = time.perf_counter() - t1
            chosen = self.choose(heads, whom, targets)
            if not chosen and not allow_none and not whom.everyone and not whom.spare:
                raise NobodyMatched(f"{video}: nobody in it is judged to be {targets[0].name} (at the model's calibrated bars); "
                                    f"nothing written to {out} (--allow-none writes it unchanged)")
            _describe(progress, "redacting")
            summary = self._write(heads, chosen, whom, out, style, margin, preview, progress, t0, probe, force)
        if verify:
            summary.verified = self.verify(out, video, progress)
        return summary

    def verify(self, out: Path, source: Path | None = None, progress: FrameProgress | None = None) -> Verification:
        """The redacted video `out` looked at again, every frame, with the most sensitive look (`actions.redact_verify`):
        the faces still found, and a contact sheet of them (OUT.verify.png) where there are any; `source`, the video
        it was redacted from, tells a face from a detection on the hidden patch itself."""
        from actions.redact_verify import verify_output

        _describe(progress, "verifying")
        return verify_output(Path(out), self._every_face_detector(), progress=progress, decode_max_side=self.settings.decode_max_side,
                             source=source)

    def _every_face_detector(self) -> EveryFaceDetector:
        if self._every_face is None:
            self._every_face = EveryFaceDetector(self.settings, self.photos.detector)
        return self._every_face

    def _write(self, heads: VideoHeads, chosen: list[Chosen], whom: Whom, out: Path, style: RedactStyle, margin: float,
               preview: Path | None, progress: FrameProgress | None, t0: float, probe: SourceProbe, force: bool = True) -> RedactSummary:
        paths = head_paths(chosen, heads)
        audit = audit_path(out)
        sheet_path = Path(preview) / (out.name + PREVIEW_SUFFIX) if preview is not None else None
        if sheet_path is not None:
            sheet_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = partial_path(out)
        remove_stale(out)
        head = {"format": AUDIT_FORMAT, "source": str(heads.path.resolve()), "source_fingerprint": heads.fingerprint,
                "output": str(out.resolve()),
                "made": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "whom": whom.to_dict(), "style": style,
                "margin": margin, "analysis": heads.source,
                "boxes_in": "pixels of the upright picture (x1, y1, x2, y2), grown by the margin and clipped to the frame",
                "tracks": [c.to_dict(heads) for c in chosen], "spared": [c.to_dict(heads) for c in heads.spared]}
        sheet = PreviewSheet(set(preview_frames(paths, heads.frames)), f"{heads.path.name} -> {out.name}: {style}, "
                             f"{counted(len(chosen), 'track')} hidden") if sheet_path is not None else None
        scale = (1.0, 1.0)

        def boxes_of(turns: int, stored: tuple[int, int]) -> HeadBoxes:
            nonlocal scale
            upright = stored if turns % 2 == 0 else (stored[1], stored[0])
            scale = (upright[0] / max(heads.size[0], 1), upright[1] / max(heads.size[1], 1))
            return HeadBoxes(paths, scale, turns, stored, margin, self.settings.follow_min_score, self.refiner, self.settings.track_iou)

        trail: AuditTrail | None = None
        ours = [tmp]  # what this run wrote, deleted if it fails (a contact sheet once written: an older one is gone by then)
        try:
            check_source_unchanged(heads.path, heads.fingerprint, out)  # a file moved over it during the analysis
            trail = AuditTrail(audit, head)
            written = write_hidden(heads.path, tmp, boxes_of, style, trail, sheet, progress, heads.frames or None, probe)
            notes = [f"left out {s}" for s in written.left_out]
            if written.stopped_at is not None:
                notes.append(f"{heads.path}: damaged: decoding stopped at frame {written.stopped_at}; the output ends there")
            trail.close({"frames_written": written.frames, "frames_with_boxes": written.frames_hidden, "boxes": written.boxes,
                         "encoder": written.encoder, "streams_copied": written.copied, "streams_left_out": written.left_out,
                         "notes": notes})
            if sheet is not None and sheet_path is not None:
                ours.append(sheet.write(sheet_path))
            check_source_unchanged(heads.path, heads.fingerprint, out)  # ...or while it was read again to be written
            put_in_place(tmp, out, trail, force)
        except BaseException as e:
            instead = clear_after_failure(e, out, ours, trail)
            if instead is not None:
                raise instead from e
            raise
        for note in notes:
            log.warning("%s", note)
        seconds = probe.duration or (heads.frames / heads.fps if heads.fps else 0.0)
        return RedactSummary(heads.path, out, audit, sheet_path, chosen, written, heads.source, time.perf_counter() - t0, heads.seconds,
                             seconds, notes, style=style, margin=margin)


def _unconfirmed(why: str, track: SeenTrack) -> str:
    return why if track.doubt is None else f"{why}; unconfirmed, hidden all the same: {track.doubt}"


def redact(request: RedactRequest, progress: FrameProgress | None = None, redactor: Redactor | None = None,
           targets: Sequence[Target] | None = None, probe: SourceProbe | None = None) -> RedactSummary:
    """Hide the request's people's heads in every frame of its video into its output (`Redactor.redact`): the paths are
    checked and the video opened before the model loads; a library is opened where one is named or a person of one is
    asked for. `redactor`: one open already (the web app's, bench's), with `targets`, whom's people made already;
    `probe`: the video's one look (`check_readable`) where the caller took it already, else taken here."""
    video, out = Path(request.video), Path(request.out)
    if redactor is None:
        parse_style(request.style)
        check_paths(video, out, request.margin, request.force)
        if request.whom.needs_library and request.library is None:
            raise HeadsearchError("a person of a library needs --library (or $HEADSEARCH_LIBRARY)")
        if request.whom.photos:
            _reference_photos(request.whom.photos)
        probe = check_readable(video) if probe is None else probe  # the one look at the video: the later steps read it
        redactor = Redactor.open(request.library, request.model, request.settings)
    return redactor.redact(video, request.whom, out, request.style, request.margin, request.preview, progress, targets,
                           force=request.force, allow_none=request.allow_none, verify=request.verify, probe=probe)


class NobodyMatched(HeadsearchError):
    """No track of the video is the person to hide (and writing it unchanged was not asked for)."""


def _reference_photos(paths: Sequence[Path]) -> list[Path]:
    """The photos of --ref (files, or folders of them); anything else refused in one line that names --ref."""
    for p in paths:
        if Path(p).is_file() and media_kind(p) != MediaKind.IMAGE:
            raise HeadsearchError(f"--ref {p}: not a photo (--ref takes photos of the person's head, or a folder of them)")
    return photo_files([Path(p) for p in paths])


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
                                None if join is None else join.to + 1, None if join is None else join.cue,
                                None if join is None else join.score))
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
                                    keys=tuple(s.id for s in sightings[tr.id]), joined_to=tr.joined_to, join_cue=tr.join_cue,
                                    join_score=tr.join_score))
    samples, period = row.sampled_frames, 1
    indexed = f"indexed {datetime.datetime.fromtimestamp(row.indexed_at).isoformat(timespec='seconds')}"
    if samples is None:  # indexed before the library kept its samples (format 11): the sampling guessed, as it was
        period = guessed_period(tracks, row.fps)
        indexed += (f"; its sampling guessed from the gaps between sightings, one frame in {period}: indexed before the library "
                    "recorded the frames it sampled (index it again to record them)")
    return VideoHeads(video, fingerprint, (row.width, row.height), row.frames_decoded, row.fps,
                      {s.shot_index: (s.start_frame, s.end_frame) for s in shot_rows}, tracks, samples, period,
                      f"the library {library.root.resolve()} ({indexed})", members)


def guessed_period(tracks: Sequence[SeenTrack], fps: float) -> int:
    """Frames between samples, guessed from the gaps between a video's sightings (the median), else from the default
    rate: for a video whose library did not record its samples. Wrong where sightings skip samples, a cut restarts the
    sampling or the file was indexed at another rate (`--fps`)."""
    gaps = [b[0] - a[0] for t in tracks for a, b in zip(t.sightings, t.sightings[1:], strict=False) if b[0] > a[0]]
    return int(np.median(gaps)) if gaps else max(1, round((fps or 25.0) / IndexSettings.sample_fps))


def head_paths(chosen: Sequence[Chosen], heads: VideoHeads) -> list[HeadPath]:
    """The paths of the heads hidden (unconfirmed ones said so) and of those spared, followed too (`heads.spared`), each
    with which sightings show a face."""
    return [HeadPath(c.track.key, c.who, c.track.sightings, *(c.frames or track_frames(c.track, heads)), spared=spared,
                     unconfirmed=c.track.doubt is not None, faced=sighting_faces(c.track.rows, c.track.sighting_keys))
            for cs, spared in ((chosen, False), (heads.spared, True)) for c in cs]

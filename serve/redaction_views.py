"""What the web app's redactions show and do, as plain data (`serve.views.Site` takes these methods): whom the video
page offers to hide or spare (every person seen in the video, one track or several, and every track), a redaction
started as a job (`serve.redacting`) of the version of the file the library indexed, and a job's files.

A job is accepted for the version of the video the library indexed, and checks, before it writes and once more after,
that the file on disk is still that version (its content fingerprint): a file replaced or rewritten meanwhile fails
the job in one line, and no output is offered.
"""
from __future__ import annotations

import math
import re
import shutil
import tempfile
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from actions.redact_frames import STYLES as REDACT_STYLES
from actions.redact_frames import parse_style
from headsearch.basics.errors import HeadsearchError, NoHeadFound
from headsearch.basics.media import media_kind
from headsearch.compare.reference import Reference, ReferenceHead
from headsearch.store.library import Library
from headsearch.store.rows import TrackRow, VideoRow
from schemas.records import MediaKind, VectorKind
from serve.files import FileChanged, FileNotServed, NotFound
from serve.jobs import Jobs
from serve.redacting import RedactJob

JOB_FILES = ("file", "audit", "sheet")  # what a finished job offers: the video, its audit trail, its contact sheet
MAX_MARGIN = 4.0  # `redact --margin`'s bound: a share of the head box


class SourceChanged(HeadsearchError):
    """The video a job was accepted for is no longer the version the library indexed."""


@dataclass(frozen=True)
class Choice:
    """Whom a redaction names (to hide, or to spare): a person of the library, one track, or the person in a photo."""

    kind: str | None = None  # "person" | "track" | "photo"; None: nobody named (everyone)
    id: int | None = None  # the person's or the track's
    photo: Path | None = None  # the uploaded photo (a temporary file, gone after the request: read at once)
    photo_name: str = ""


class Redactions:
    """The web app's redactions (a part of `serve.views.Site`, which has the library, the jobs and the indexed files)."""

    # Site's: the library, the jobs, the redactor made once (under its lock), `video_row`, `open_indexed` and `job`
    library: Library
    jobs: Jobs
    _redactor: object
    _redactor_lock: threading.Lock

    def redactor(self):
        """The redactor (`headsearch redact`'s), with this app's model and library, made once."""
        from actions.redact import Redactor
        from actions.session import AnalysisSession

        with self._redactor_lock:
            if self._redactor is None:
                self._redactor = Redactor(AnalysisSession(self.service.photos.load(), self.library))  # type: ignore[attr-defined]
            return self._redactor

    def redact_choices(self, video: VideoRow, tracks: list[TrackRow], members: dict[int, int], persons: dict) -> dict | None:
        """Whom the video page offers to hide ("only") or spare ("everyone but"): every person with a track in the video
        (one track or more: a person the people page does not list yet is one all the same), then every track; hidden
        people are left out, as everywhere. None for a photo."""
        from actions.redact import DEFAULT_MARGIN

        if video.kind != "video":
            return None
        seen: dict[int, int] = {}
        shown = []
        for t in sorted(tracks, key=lambda t: (t.start_time, t.id)):
            pid = members.get(t.id)
            if pid in persons and persons[pid].hidden:
                continue
            label = (persons[pid].name or f"person {pid}") if pid in persons else None
            if pid in persons:
                seen[pid] = seen.get(pid, 0) + 1
            shown.append({"id": t.id, "value": f"track:{t.id}", "start": t.start_time, "end": t.end_time, "person": label})
        people = [{"id": pid, "value": f"person:{pid}", "label": persons[pid].name or f"person {pid}", "tracks": n}
                  for pid, n in sorted(seen.items(), key=lambda kv: (-kv[1], kv[0]))]
        return {"people": people, "tracks": shown, "styles": list(REDACT_STYLES), "margin": DEFAULT_MARGIN}

    # ----- a redaction as a job ------------------------------------------------------------------
    def start_redaction(self, video_id: int, whom: str, choice: Choice, style: str, margin: float | None = None,
                        verify: bool = True) -> RedactJob:
        """A redaction of a library video (the version indexed) as a job: `whom` is "everyone", "person" (hide the
        one `choice` names) or "except" (hide everyone but them). What can be refused is refused now, in one line (no
        such video, person or track, a photo, a file changed since it was indexed, a photo with no head or several, no
        bars to judge who is who); the video is then written, in the job's thread, into the app's cache folder."""
        from actions.redact import DEFAULT_MARGIN, OUTPUT_SUFFIXES, PREVIEW_SUFFIX, Whom, audit_path, check_paths, check_readable, redact
        from actions.requests import RedactRequest

        style = parse_style(style, "style")
        if whom not in ("everyone", "person", "except"):
            raise HeadsearchError("whom must be everyone, person or except")
        if whom != "everyone" and choice.kind is None:
            raise HeadsearchError(f"whom={whom} needs a person: a person or a track (its id), or a photo")
        margin = DEFAULT_MARGIN if margin is None else margin
        if not (math.isfinite(margin) and 0.0 <= margin <= MAX_MARGIN):
            raise HeadsearchError(f"margin {margin}: a share of the head box from 0 to {MAX_MARGIN:g} (0.2: a fifth of its size)")
        video = self.video_row(video_id)
        if video.kind != "video":
            raise HeadsearchError(f"{Path(video.path).name} is a photo: only videos are redacted")
        self.open_indexed(video).close()  # only the version indexed
        source = Path(video.path)
        probe = check_readable(source)  # its one look, passed to the job (which checks it is still the file indexed)
        redactor = self.redactor()
        targets, said = ([], "") if whom == "everyone" else self._target(redactor, choice)
        chosen = (Whom(everyone=True) if whom == "everyone" else Whom(spare=(said,)) if whom == "except" else
                  Whom(photos=(Path(said),)) if choice.kind == "photo" else Whom(person=said))
        words = ("everyone" if whom == "everyone" else targets[0].name if whom == "person" else f"everyone but {targets[0].name}")
        suffix = source.suffix.lower() if source.suffix.lower() in OUTPUT_SUFFIXES else ".mkv"
        out_name = re.sub(r"[^A-Za-z0-9._-]+", "_", source.stem)[:60] + ".redacted" + suffix

        def still_indexed() -> None:
            """The file on disk is still the version this job was accepted for (its size and content fingerprint)."""
            try:
                self.open_indexed(video).close()
            except (FileChanged, FileNotServed) as e:
                raise SourceChanged(f"{source.name} changed since it was indexed: nothing was written (this redaction was accepted "
                                    "for the version the library indexed; index the file again to redact the new one)") from e

        def make(key: str, folder: Path) -> RedactJob:
            out = folder / out_name
            return RedactJob(id=key, folder=folder, kind="redact", video_id=video_id, video=source.name, whom=words, style=style,
                             out=out, audit=audit_path(out), sheet=folder / (out_name + PREVIEW_SUFFIX), margin=margin)

        def run(job: RedactJob) -> dict:
            out = job.out
            check_paths(source, out, margin)
            still_indexed()  # it may have waited its turn
            job.before_writing = still_indexed  # and after the analysis, before a frame is written
            # The request `redact` makes of its options, made of the form: written into the job's own folder (`force`:
            # as the redactor always wrote there; `allow_none`: nobody matched writes it unchanged, as before), and
            # checked only when everyone is hidden (the check tells nobody apart).
            request = RedactRequest(source, out, chosen, style, margin, out.parent, self.library.root, force=True, allow_none=True,
                                    verify=verify and whom == "everyone")
            summary = redact(request, job, redactor, targets, probe)
            still_indexed()  # and once all is written: a file replaced meanwhile fails the job (its folder goes)
            # Its files by their names, and the check's contact sheet not at all: the page links the job's files.
            served = {out: out.name, job.audit: job.audit.name, job.sheet: job.sheet.name}
            return summary.to_dict(served.get)  # what `redact --json` prints for the same run

        return self.jobs.start(make, run)

    def _target(self, redactor, choice: Choice) -> tuple[list, str]:
        """The person a choice names, as the redactor's target, and what the audit trail says it was."""
        if choice.kind == "person":
            return redactor.targets(_whom(person=str(choice.id))), str(choice.id)  # PersonNotFound (404) or no thresholds
        if choice.kind == "track":
            return [self._track_target(redactor, int(choice.id or 0))], f"track {choice.id}"
        if choice.kind == "photo" and choice.photo is not None:
            return [_photo_target(redactor, choice.photo, choice.photo_name)], Path(choice.photo_name).name or "photo"
        raise HeadsearchError("name a person, a track or a photo")

    def _track_target(self, redactor, track_id: int):
        """One track of the library as the person to find: its own vectors (each track in the video like it counts)."""
        from actions.redact import Target

        with self.library.people_reading() as store:
            if not store.tracks(track_ids=[track_id]):
                raise NotFound(f"no track {track_id}")
            kinds = [VectorKind.ID] + ([VectorKind.HEAD] if VectorKind.HEAD in self.library.model.kinds else [])
            vectors = {kind: v[track_id] for kind in kinds if track_id in (v := store.track_vectors(kind, [track_id]))}
        if not vectors:
            raise HeadsearchError(f"track {track_id} has no vectors to find it by: choose its person, or everyone")
        _ = redactor.thresholds  # refused now, in one line, without bars to judge who is who
        name = f"track {track_id}"
        return Target(name, Reference.of(name, [ReferenceHead(vectors, VectorKind.ID in vectors)], [f"{name} of {self.library.root}"]))

    def job_file(self, key: str, which: str = "file") -> Path:
        """A finished job's redacted file, its audit trail or its contact sheet (`which`: one of JOB_FILES)."""
        job = self.job(key)  # type: ignore[attr-defined]
        if not isinstance(job, RedactJob):
            raise NotFound(f"job {key} is no redaction: it has no file")
        if job.state != "done":
            raise NotFound(f"redaction {key} has no file ({job.state})")
        path = {"file": job.out, "audit": job.audit, "sheet": job.sheet}[which]
        if not path.is_file():
            raise NotFound(f"redaction {key}'s {'file' if which == 'file' else which} is gone")
        return path


def _whom(**what):
    from actions.redact import Whom

    return Whom(**what)


def _photo_target(redactor, upload: Path, name: str):
    """The person in an uploaded photo as the redactor's target, named by the photo's name (its messages too): one head,
    as `redact --ref` takes it."""
    shown = Path(name).name or "photo"
    suffix = Path(shown).suffix.lower() if media_kind(shown) == MediaKind.IMAGE else ".jpg"
    with tempfile.TemporaryDirectory(prefix="headsearch-redact-ref-") as folder:
        photo = Path(folder) / ("reference" + suffix)  # the redactor takes photos by their names' kind
        shutil.copyfile(upload, photo)
        try:
            target = redactor.targets(_whom(photos=(photo,)))[0]
        except NoHeadFound as e:
            raise NoHeadFound(str(e).replace(str(photo), shown)) from e
        except HeadsearchError as e:
            raise HeadsearchError(str(e).replace(str(photo), shown)) from e
    stem = Path(shown).stem or "photo"
    return replace(target, name=stem, reference=replace(target.reference, name=stem, sources=[shown]))

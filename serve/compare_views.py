"""The Compare page as plain data (`serve.views.Site` takes these methods): a reference photo compared with a library
video or an uploaded clip (`headsearch compare`), or the library's named people as the cast over one video (`compare
--cast`), each run as a job (`serve.jobs`): the request refuses what it can in one line and starts the job; the job's
page shows its progress, then the same result page, and its /api twin the entry `compare --json` gives."""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from headsearch.basics.errors import HeadsearchError
from headsearch.people.listing import list_people
from headsearch.search.service import SearchService
from headsearch.store.library import Library
from headsearch.store.rows import VideoRow
from serve.files import OpenFile
from serve.jobs import Job, Jobs
from serve.view_data import common_folder, data_url, under, watch_url

KEPT_CLIP = "clip.part"  # an uploaded clip in its job's folder: analysed as a video whatever its name says, as before


@dataclass(kw_only=True)
class CompareJob(Job):
    """A comparison or a cast over one video: its result is the entry `compare --json` gives (`compare --cast --json`'s
    for a cast); `page` what the result page shows."""

    name: str  # the video's name as the page shows it (an uploaded clip: as the user named it)
    video_id: int | None  # a library video's; None for an uploaded clip
    page: dict = field(default_factory=dict)  # when done: the comparison's or the cast's page data

    def to_dict(self, prefix: str = "") -> dict:
        return {**super().to_dict(prefix), "video": self.name, "video_id": self.video_id}


class Comparing:
    """Compare and cast as jobs (a part of `serve.views.Site`)."""

    # Site's: the library, the search service (its photo embedder), the jobs; `video_row` and `open_indexed`
    library: Library
    service: SearchService
    jobs: Jobs
    video_row: Callable[[int], VideoRow]
    open_indexed: Callable[[VideoRow], OpenFile]

    def compare_form(self) -> dict:
        """The Compare page's form: the library's videos to pick from."""
        with self.library.browsing() as b:
            files = [v for v in b.videos() if v.kind == "video"]
        root = common_folder([str(Path(v.path).parent) for v in files])
        choices = sorted(({"id": v.id, "name": under(v.path, root), "path": v.path} for v in files), key=lambda c: c["name"].casefold())
        return {"videos": choices, "root": root, "comparison": None, "cast": None, "job": None}  # named by their place under the folder they share

    def compare_job_page(self, job: CompareJob) -> dict:
        """A comparison's job as its page shows it: the form, then its progress, its failure, or its result."""
        form = self.compare_form()
        if job.state == "done":
            return {**form, job.kind if job.kind == "cast" else "comparison": job.page, "job": job.to_dict()}
        return {**form, "job": job.to_dict()}

    def start_compare(self, photo: Path | None, photo_name: str, video_id: int | None = None, clip: Path | None = None,
                      clip_name: str | None = None, cast: bool = False) -> CompareJob:
        """A reference photo (its largest head) compared with a library video (by id) or an uploaded clip, as `headsearch
        compare` does, or, `cast`, the library's named people as the cast (`compare --cast`), as a job. What can be
        refused is refused now, in one line (neither or both of a video and a clip, no photo, no head in it, no bars, no
        named people, a file changed since it was indexed); an uploaded clip is kept in the job's folder until it ends."""
        from actions.compare import Comparer, open_comparison
        from actions.requests import CompareRequest, ReferenceSpec
        from actions.session import LARGEST, AnalysisSession

        if (video_id is None) == (clip is None):
            raise HeadsearchError("pick a video of the library or upload a clip (one of them)")
        if photo is None and not cast:
            raise HeadsearchError("give a reference photo, or take the library's named people as the cast")
        session = AnalysisSession(self.service.photos, self.library)
        Comparer.of(session)  # the library's bars; refused in one line without them
        if video_id is not None:
            video = self.video_row(video_id)
            self.open_indexed(video).close()  # only the version indexed
            source, name = Path(video.path), Path(video.path).name
        else:
            source, name = Path(str(clip)), clip_name or "clip"
        # The request `compare` (`--cast`) makes of its options, made of the form: the photo's largest head, named as
        # the user named it; the cast, the library's named people (each named by the library).
        if cast:
            named = [p for p in list_people(self.library, with_looks=False) if p.name]
            if not named:
                raise HeadsearchError("no named people in this library to make the cast: name people first (the People page, or "
                                      "`headsearch people name ID NAME`)")
            request = CompareRequest(references=tuple(ReferenceSpec(persons=(p.id,)) for p in named), library=self.library.root)
            work = self._cast_run(lambda: open_comparison(request, session))  # the references made when its turn comes
        else:
            request = CompareRequest(references=(ReferenceSpec(photos=(Path(str(photo)),), labels=(photo_name,)),),
                                     library=self.library.root, ref_head=LARGEST)
            prepared = open_comparison(request, session)  # the photo read now: the upload goes with the request
            work = self._compare_run(prepared)

        def make(key: str, folder: Path) -> CompareJob:
            if clip is not None:  # the upload is a temporary file gone with the request: the job keeps its own, before it runs
                _keep(clip, folder / KEPT_CLIP)
            return CompareJob(id=key, folder=folder, kind="cast" if cast else "compare", name=name, video_id=video_id)

        def run(job: CompareJob) -> dict:
            path = source if video_id is not None else job.folder / KEPT_CLIP
            try:
                page, twin = work(path, job)
            except HeadsearchError as e:
                if video_id is None:  # an uploaded clip: named as the user named it, not by the app's copy of it
                    e.args = (str(e).replace(str(path), name), *e.args[1:])
                raise
            finally:
                if video_id is None:
                    path.unlink(missing_ok=True)  # the clip is only kept while it is compared
            job.page = {**page, "name": name, "video_id": video_id, **({"video": name} if video_id is None else {})}
            return {**twin, "video": name if video_id is None else twin["video"]}

        return self.jobs.start(make, run)

    @staticmethod
    def _compare_run(prepared) -> Callable[[Path, Job], tuple[dict, dict]]:
        """The work of a comparison: (the page's data, the entry of `compare --json`)."""
        from headsearch.compare.report import frame_picture, page_data, plot_svg

        reference = prepared.references[0]

        def work(path: Path, job: Job) -> tuple[dict, dict]:
            result = _one_video(prepared.compare([path], job))
            c = result.comparisons[0]
            video_id = getattr(job, "video_id", None)
            link = (lambda t: watch_url(video_id, t, t + 2.0)) if video_id is not None else None
            data = page_data(c)
            for w in data["worst"]:
                jpeg = frame_picture(c, w.pop("frame"))
                w["picture"] = None if jpeg is None else data_url(jpeg)
            page = {**data, "video": c.video, "plot": plot_svg(c, link),
                    "reference_picture": None if reference.picture is None else data_url(reference.picture),
                    "drift_links": [link(d.time) if link else None for d in c.drifts]}
            return page, result.to_json()[0]  # what `compare --json` prints

        return work

    @staticmethod
    def _cast_run(prepare) -> Callable[[Path, Job], tuple[dict, dict]]:
        """The work of a cast: the named people as references (`prepare`), then one video cast (`compare --cast`)."""
        from headsearch.basics.timeline import format_time
        from headsearch.compare.cast import gap_plot_svg

        def work(path: Path, job: Job) -> tuple[dict, dict]:
            result = _one_video(prepare().cast([path], job))
            run = result.run
            video_id = getattr(job, "video_id", None)
            apps = [{**a.to_dict(), "start_text": format_time(a.start), "end_text": format_time(a.end),
                     "link": None if video_id is None else watch_url(video_id, a.start, a.end)} for a in run.appearances()]
            page = {"characters": run.summaries(), "appearances": apps, "plot": gap_plot_svg(run),
                    "nobody": sum(h.character is None and h.tier != "no_head" for h in run.videos[0].heads)}
            return page, {**result.to_json()[0], "video": str(path)}  # `compare --cast --json`'s entry

        return work


def _one_video(result):
    """The result of a job's one video; its one line raised when it could not be compared."""
    if result.failed:
        raise HeadsearchError(result.failed[0][1])
    return result


def _keep(upload: Path, kept: Path) -> None:
    """The job's own copy of an uploaded clip: a second name of the same file where they share a file system."""
    try:
        os.link(upload, kept)
    except OSError:
        shutil.copyfile(upload, kept)

"""The web app's Compare (`headsearch compare`, and `compare --cast`) as jobs, and every job's page: POST /compare starts
one and answers with its page (303), POST /api/compare with its JSON (202); GET /jobs/ID shows a job's progress, then its
result (a comparison's or a cast's on the Compare page, a redaction's on its own), GET /api/jobs/ID its JSON twin (for a
comparison, its result is the entry `compare --json` gives)."""
from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from serve.compare_views import CompareJob
from serve.guard import require_csrf_token
from serve.jobs import Job
from serve.pages import JsonAnswer, page, parse_id, site_of, wants_json
from serve.uploads import received_compare
from serve.views import NotFound


async def compare_form(request: Request) -> Response:
    return page(request, "compare.html", await run_in_threadpool(site_of(request).compare_form))


async def compare(request: Request) -> Response:
    """POST /compare and POST /api/compare: a reference photo (field `photo`), or the library's named people as the cast
    (`cast` = people), and a library video (`video_id`) or an uploaded clip (`clip`): starts a job."""
    state = request.app.state
    if not wants_json(request) and not request.headers.get("content-type", "").startswith("multipart/form-data"):
        require_csrf_token(request, {})  # no form to carry the token: only its header can
    async with received_compare(request, state.max_clip_upload, state.upload_slots) as sent:
        fields = sent.photo.fields
        if not wants_json(request):
            require_csrf_token(request, fields)
        raw = fields.get("video_id", "").strip()
        video_id = parse_id(raw) if raw else None
        if raw and video_id is None:
            raise NotFound(f"no video {raw[:20]}")
        if sent.clip is not None:
            video_id = None
        job = await run_in_threadpool(site_of(request).start_compare, sent.photo.path, sent.photo.name, video_id, sent.clip,
                                      sent.clip_name, fields.get("cast") == "people")
    return job_started(request, job)


def job_started(request: Request, job: Job) -> Response:
    """A job just started: its page (303), or from /api its JSON (202), which names its /api page to poll."""
    if wants_json(request):
        return JsonAnswer({"ok": True, **job.to_dict("/api")}, status_code=202)
    return RedirectResponse(f"/jobs/{job.id}", status_code=303)


async def job_page(request: Request) -> Response:
    """GET /jobs/ID: a job's progress (the page reloads itself while it runs), then its result: a comparison's or a cast's
    on the Compare page, a redaction's check, contact sheet and player, then its file and audit trail."""
    site = site_of(request)
    job = site.job(request.path_params["job_id"])
    if wants_json(request):
        return JsonAnswer(job.to_dict("/api"))
    if isinstance(job, CompareJob):
        return page(request, "compare.html", await run_in_threadpool(site.compare_job_page, job))
    return page(request, "job.html", job.to_dict())


def job_routes(prefix: str) -> list[Route]:
    """The routes that start a comparison and show any job, under `prefix` ("" for the pages, "/api" for their twins)."""
    return [Route(f"{prefix}/compare", compare_form, methods=["GET"]),
            Route(f"{prefix}/compare", compare, methods=["POST"]),
            Route(f"{prefix}/jobs/{{job_id:str}}", job_page)]

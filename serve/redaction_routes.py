"""The web app's redactions as routes (`headsearch redact` as a job, `serve.redacting`): started from the video page
(whom: everyone, only someone, or everyone but someone; that someone a person or a track seen in the video, or the
person in an uploaded photo), or from a person's page; the job's page with its progress, then the check of its output,
its contact sheet and player, and only then the file and its audit trail."""
from __future__ import annotations

import mimetypes

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Route

from serve.guard import require_csrf_token
from serve.job_routes import job_started
from serve.pages import form_fields, id_field, site_of
from serve.redaction_views import JOB_FILES, Choice
from serve.uploads import received_photo


def _margin(fields: dict) -> float | None:
    """The form's margin (a share of the head box), None where it gives none; 400 when it is no number."""
    raw = str(fields.get("margin", "")).strip()
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError as e:
        raise HTTPException(400, "margin must be a number: a share of the head box from 0 to 4 (0.2: a fifth of its size)") from e


def _verify(fields: dict) -> bool:
    """Whether a redaction of everyone looks at its output again for faces left showing (`verify`: on unless "0",
    "false", "no" or "off")."""
    raw = fields.get("verify", True)
    if isinstance(raw, bool):
        return raw
    said = str(raw).strip().casefold()
    if said in ("", "1", "true", "yes", "on"):
        return True
    if said in ("0", "false", "no", "off"):
        return False
    raise HTTPException(400, "verify must be true or false (whether the output is looked at again for faces)")


def _choice(fields: dict) -> Choice:
    """Whom a form names: `who` ("person:ID" or "track:ID", the video page's list), or `person` or `track` (an id)."""
    who = str(fields.get("who", "")).strip()
    if who:
        kind, _, raw = who.partition(":")
        if kind not in ("person", "track"):
            raise HTTPException(400, "who must be person:ID or track:ID")
        return Choice(kind, id_field(raw, kind))
    for kind in ("person", "track"):
        raw = str(fields.get(kind, "")).strip()
        if raw:
            return Choice(kind, id_field(raw, kind))
    return Choice()


async def video_redact(request: Request) -> Response:
    """POST /videos/ID/redact: `whom` = everyone | person (only them) | except (everyone but them), them named by `who`
    (person:ID or track:ID), `person` or `track` (an id), or by a photo (a multipart form's `photo`); `style` = blur |
    pixelate | box; `margin` (a share of the head box). Starts a job (one redacts at a time; the file goes to the app's
    cache, the source is only read) and answers with its page (303), or its JSON (202) from /api."""
    vid = request.path_params["video_id"]
    site = site_of(request)
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        state = request.app.state
        async with received_photo(request, state.max_upload, state.upload_slots) as photo:
            require_csrf_token(request, photo.fields)
            fields = photo.fields
            chosen = Choice("photo", photo=photo.path, photo_name=photo.name)
            job = await run_in_threadpool(site.start_redaction, vid, str(fields.get("whom", "person")), chosen,
                                          str(fields.get("style", "blur")), _margin(fields), _verify(fields))
    else:
        fields = await form_fields(request)
        job = await run_in_threadpool(site.start_redaction, vid, str(fields.get("whom", "everyone")), _choice(fields),
                                      str(fields.get("style", "blur")), _margin(fields), _verify(fields))
    return job_started(request, job)


async def person_redact(request: Request) -> Response:
    """POST /people/ID/redact: hide this person in one of their videos (`video_id`), in `style`; as video_redact."""
    pid = request.path_params["person_id"]
    fields = await form_fields(request)
    vid = id_field(fields.get("video_id", ""), "video")
    job = await run_in_threadpool(site_of(request).start_redaction, vid, "person", Choice("person", pid),
                                  str(fields.get("style", "blur")), _margin(fields))
    return job_started(request, job)


async def job_file(request: Request) -> Response:
    """GET /jobs/ID/file (the redacted video, to download; a player plays it from here too), /jobs/ID/audit (its audit
    trail, JSON) and /jobs/ID/sheet (its contact sheet, PNG)."""
    which = request.url.path.rsplit("/", 1)[-1]
    path = await run_in_threadpool(site_of(request).job_file, request.path_params["job_id"], which)
    kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    if which == "audit":
        kind = "application/json"
    return FileResponse(path, media_type=kind, filename=path.name, content_disposition_type="attachment" if which == "file" else "inline",
                        headers={"Cache-Control": "no-store"})


def redaction_routes(prefix: str) -> list[Route]:
    """The routes that start a redaction (its job's page is `serve.job_routes`'), under `prefix` ("" for the pages, "/api" for their twins)."""
    return [Route(f"{prefix}/videos/{{video_id:id}}/redact", video_redact, methods=["POST"]),
            Route(f"{prefix}/people/{{person_id:id}}/redact", person_redact, methods=["POST"])]


def job_file_routes() -> list[Route]:
    """A job's files: the video, its audit trail, its contact sheet."""
    return [Route(f"/jobs/{{job_id:str}}/{which}", job_file) for which in JOB_FILES]

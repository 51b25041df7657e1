"""`headsearch serve`: search, watch and browse a library in a browser (Starlette + Jinja2, no build step).

Every page has a JSON twin under /api with the same data. Media, thumbnails and frames are served by
id (the path comes from the library, never from the request), only as the files indexed, never
through a symbolic link (`serve.files`); nothing lists folders. Ids are whole numbers below 2^63
(DuckDB's BIGINT); any other is not found. Uploads are capped, streamed to disk, a few at a time,
and checked before anything decodes them (`serve.uploads`). Requests that change something need the
same origin and the session's token; off the loopback, every request needs the token (`serve.guard`).
"""
from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import TypeVar

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from headsearch.basics.errors import HeadsearchError, LibraryError, MediaError, NoHeadFound
from headsearch.basics.settings import MediaLimits
from headsearch.basics.text import printable
from headsearch.exports.timelines import EXPORT_FORMATS
from headsearch.people.persons import (
    PersonNotFound,
    hide_person,
    keep_apart,
    merge_people,
    move_track,
    name_person,
    not_this_person,
    split_person,
    update_people,
)
from serve.files import FileChanged, FileNotServed, OpenFileResponse
from serve.guard import CSRF_FIELD, CSRF_HEADER, SECURITY_HEADERS, Backoff, Guard, SessionTokens, checked_token, csrf_token, require_csrf_token
from serve.job_routes import job_routes
from serve.jobs import JobsBusy
from serve.pages import HERE, JsonAnswer, parse_id, templates
from serve.pages import form_fields as _form
from serve.pages import hms as hms  # the pages' time filter: tests/test_serve.py imports it from here
from serve.pages import id_field as _id_field
from serve.pages import page as _page
from serve.pages import site_of as _site
from serve.pages import wants_json as _wants_json
from serve.redaction_routes import job_file_routes, redaction_routes
from serve.uploads import UploadRefused, UploadSlots, received_photo
from serve.views import FILES_PAGE, MAX_K, NotFound, Site

log = logging.getLogger(__name__)

class IdConvertor(Convertor[int]):
    """`{name:id}` in a route: digits only; a number past BIGINT is not found (404), never sent to the database."""

    regex = "[0-9]+"

    def convert(self, value: str) -> int:
        parsed = parse_id(value)
        if parsed is None:
            raise NotFound(f"not found: {value[:20]}{'...' if len(value) > 20 else ''} is no id (ids are below 2^63)")
        return parsed

    def to_string(self, value: int) -> str:
        return str(value)


register_url_convertor("id", IdConvertor())


# ----- helpers -------------------------------------------------------------------------------------
N = TypeVar("N", int, float)
MAX_SECONDS = 1e7  # a time in a video asked for (start, end): from 0 up to, not including, this


def _number(values: Mapping[str, str], name: str, default: N, low: N, high: N, kind: type[N] = int) -> N:
    """A number of a request's query or form (`values`), `default` when it has none; 400 when it is not one of its kind:
    `int`, a whole number from `low` to `high`; `float`, a number of seconds from `low` up to, not including, `high`."""
    raw = values.get(name)
    if raw is None:
        return default
    try:
        value = kind(raw)
    except ValueError as e:
        raise HTTPException(400, f"{name} must be {'a whole number' if kind is int else 'a number of seconds'}") from e
    if kind is int and not low <= value <= high:
        raise HTTPException(400, f"{name} must be between {low} and {high}")
    if kind is float and not low <= value < high:  # NaN too
        raise HTTPException(400, f"{name} out of range")
    return value


def _moment(request: Request) -> tuple[float, float]:
    """The moment a query asks for, in seconds: `start` (0 without one) to `end` (`start` without one)."""
    start = _number(request.query_params, "start", 0.0, 0.0, MAX_SECONDS, float)
    return start, _number(request.query_params, "end", start, 0.0, MAX_SECONDS, float)


def _flag(value: str | None) -> bool:
    return (value or "").lower() in {"1", "on", "true", "yes"}


# ----- pages ---------------------------------------------------------------------------------------
async def search_form(request: Request) -> Response:
    return _page(request, "search.html", {"heads": [], "hits": [], "k": 5})


async def search(request: Request) -> Response:
    """POST / and POST /api/query: a photo in (multipart field `photo`, or the raw image as the body);
    /api/query answers exactly what `headsearch query --json` prints for that photo. The page's form
    carries the session's token; /api/query, which changes nothing, needs none (`serve.guard`)."""
    state = request.app.state
    async with received_photo(request, state.max_upload, state.upload_slots) as photo:
        fields = photo.fields
        if not _wants_json(request):
            require_csrf_token(request, fields)
        k = _number(fields, "k", 5, 1, MAX_K)
        all_heads, whole_image, show_weak = _flag(fields.get("all")), _flag(fields.get("whole_image")), _flag(fields.get("show_weak"))
        site = _site(request)
        if photo.path is None:  # the page's options, on the photo searched last
            photo_id = fields["photo_id"]
            data, name = site.kept_photo(photo_id)
        else:
            data, name = photo.path, photo.name
            photo_id = None if _wants_json(request) else await run_in_threadpool(site.keep_photo, photo.path, name)
        answer = await run_in_threadpool(site.search, data, name, k, all_heads, whole_image, show_weak)
    if _wants_json(request):
        from headsearch.search.hits import results_json

        return JsonAnswer(results_json(answer.results, all_heads))
    page = await run_in_threadpool(site.query_page, answer, all_heads, name)
    return _page(request, "search.html", {**page, "k": k, "all": all_heads, "whole_image": whole_image, "show_weak": show_weak,
                                          "photo": name, "photo_id": photo_id})


def _download(data: bytes, filename: str) -> Response:
    kind = EXPORT_FORMATS[Path(filename).suffix]
    disposition = "inline" if kind.one_video else f'attachment; filename="{filename}"'  # a player's cues open in place
    return Response(data, media_type=kind.media_type, headers={"Content-Disposition": disposition, "Cache-Control": "no-store"})


async def person_export(request: Request) -> Response:
    """GET /people/ID/export.FORMAT: the person's moments for an editor; /api/people/ID/export: the moments as JSON."""
    from headsearch.exports.timelines import moment_dict

    site = _site(request)
    moments, name = await run_in_threadpool(site.person_moments_export, request.path_params["person_id"])
    if _wants_json(request):
        return JsonAnswer({"person": name, "moments": [moment_dict(m) for m in moments], "exports": site.export_links(
            f"/people/{request.path_params['person_id']}/export", moments)})
    data, filename = await run_in_threadpool(site.export_file, moments, "." + request.path_params["fmt"], name)
    return _download(data, filename)


async def search_export(request: Request) -> Response:
    """GET /exports/KEY.FORMAT: a search's moments for an editor (the last searches' are kept); /api/exports/KEY: JSON."""
    from headsearch.exports.timelines import moment_dict

    site = _site(request)
    moments = site.kept(request.path_params["key"])
    if _wants_json(request):
        return JsonAnswer({"moments": [moment_dict(m) for m in moments]})
    data, filename = await run_in_threadpool(site.export_file, moments, "." + request.path_params["fmt"], moments[0].group if moments else "search")
    return _download(data, filename)


async def video_cues(request: Request) -> Response:
    """GET /videos/ID/who.vtt (who is on screen) and /videos/ID/chapters.vtt (one chapter a shot), for the player."""
    data, filename = await run_in_threadpool(_site(request).video_cues, request.path_params["video_id"],
                                             request.url.path.endswith("/chapters.vtt"))
    return _download(data, filename)


async def videos(request: Request) -> Response:
    query = request.query_params.get("q", "")[:200]
    kind = request.query_params.get("kind", "all")
    if kind not in ("all", "video", "image"):
        raise HTTPException(400, "kind must be all, video or image")
    page = _number(request.query_params, "page", 1, 1, 1_000_000)
    per_page = _number(request.query_params, "per_page", FILES_PAGE, 1, 1000)
    return _page(request, "videos.html", await run_in_threadpool(_site(request).videos_page, query, kind, page, per_page))


async def video(request: Request) -> Response:
    return _page(request, "video.html", await run_in_threadpool(_site(request).video_page, request.path_params["video_id"]))


async def track(request: Request) -> Response:
    k = _number(request.query_params, "k", 12, 1, MAX_K)
    return _page(request, "track.html", await run_in_threadpool(_site(request).track_page, request.path_params["track_id"], k))


async def people(request: Request) -> Response:
    data = await run_in_threadpool(_site(request).people_page, _flag(request.query_params.get("all")))
    return _page(request, "people.html", data)


async def inbox(request: Request) -> Response:
    page = _number(request.query_params, "page", 1, 1, 1_000_000)
    return _page(request, "inbox.html", await run_in_threadpool(_site(request).inbox_page, page))


async def person(request: Request) -> Response:
    return _page(request, "person.html", await run_in_threadpool(_site(request).person_page, request.path_params["person_id"]))


async def watch(request: Request) -> Response:
    start, end = _moment(request)
    track_id = request.query_params.get("track")
    track = None if track_id is None else _id_field(track_id, "track")
    data = await run_in_threadpool(_site(request).watch_page, request.path_params["video_id"], start, end, track)
    return _page(request, "watch.html", data)


# ----- corrections (forms post here; /api twins answer JSON) ----------------------------------------
def _done(request: Request, back: str, result: dict) -> Response:
    if _wants_json(request):
        return JsonAnswer({"ok": True, **result})
    return RedirectResponse(back, status_code=303)


async def person_name(request: Request) -> Response:
    pid = request.path_params["person_id"]
    name = str((await _form(request)).get("name", ""))
    await run_in_threadpool(name_person, _site(request).library, pid, name)
    return _done(request, f"/people/{pid}", {"id": pid, "name": " ".join(name.split()) or None})


async def person_hide(request: Request) -> Response:
    pid = request.path_params["person_id"]
    hidden = (await _form(request)).get("hidden", "1")
    hidden = hidden if isinstance(hidden, bool) else _flag(str(hidden))
    await run_in_threadpool(hide_person, _site(request).library, pid, hidden)
    return _done(request, f"/people/{pid}", {"id": pid, "hidden": hidden})


async def person_merge(request: Request) -> Response:
    pid = request.path_params["person_id"]
    other = _id_field((await _form(request)).get("other", ""), "person")
    await run_in_threadpool(merge_people, _site(request).library, pid, other)
    return _done(request, f"/people/{pid}", {"id": pid, "merged": other})


async def person_split(request: Request) -> Response:
    pid = request.path_params["person_id"]
    raw = (await _form(request)).get("tracks", "")
    tracks = [_id_field(x, "track") for x in str(raw).replace(",", " ").split() if x.isdigit()]
    if not tracks:
        raise HTTPException(400, "tracks must list track ids")
    new = await run_in_threadpool(split_person, _site(request).library, pid, tracks)
    return _done(request, f"/people/{new}", {"id": new, "from": pid, "tracks": tracks})


async def track_not_this_person(request: Request) -> Response:
    tid = request.path_params["track_id"]
    raw = str((await _form(request)).get("person", "")).strip()
    site = _site(request)
    was = await run_in_threadpool(not_this_person, site.library, tid, _id_field(raw, "person") if raw.isdigit() else None)
    return _done(request, f"/people/{was}", {"track_id": tid, "was": was})


async def track_move(request: Request) -> Response:
    """Track T is person P, in one step (from another person or from the inbox)."""
    tid = request.path_params["track_id"]
    fields = await _form(request)
    pid = _id_field(fields.get("person", ""), "person")
    was = await run_in_threadpool(move_track, _site(request).library, tid, pid)
    back = str(fields.get("back", ""))  # where the form was: the inbox, the track, or the person it left
    allowed = {"/inbox", f"/tracks/{tid}", *([f"/people/{was}"] if was is not None else [])}
    return _done(request, back if back in allowed else f"/people/{pid}", {"track_id": tid, "person": pid, "was": was})


async def person_different(request: Request) -> Response:
    """No, these two are not the same person: never suggested together again."""
    pid = request.path_params["person_id"]
    fields = await _form(request)
    other = _id_field(fields.get("other", ""), "person")
    await run_in_threadpool(keep_apart, _site(request).library, pid, other)
    back = str(fields.get("back", ""))
    return _done(request, "/people" if back == "/people" else f"/people/{pid}", {"id": pid, "different": other})


async def person_forget(request: Request) -> Response:
    """Forget a person for good (`headsearch people forget`): the form's `confirm` must be their name (or "person ID")."""
    pid = request.path_params["person_id"]
    confirm = str((await _form(request)).get("confirm", ""))
    return _done(request, "/people", await run_in_threadpool(_site(request).forget, pid, confirm))


async def people_update(request: Request) -> Response:
    await _form(request)
    summary = await run_in_threadpool(update_people, _site(request).library)
    return _done(request, "/people", {"summary": summary.line()})


# ----- media by id ---------------------------------------------------------------------------------
async def media(request: Request) -> Response:
    """The file itself, with HTTP Range support (seeking in the player): only the version indexed, never through a link."""
    site = _site(request)
    v = await run_in_threadpool(site.video_row, request.path_params["video_id"])
    opened = await run_in_threadpool(site.open_indexed, v)
    try:
        if v.kind != "image" and not (await run_in_threadpool(site.playback, v)).direct:
            raise HTTPException(415, "browsers cannot play this file; use its preview")
    except BaseException:
        opened.close()
        raise
    return OpenFileResponse(opened, headers={"Cache-Control": "private, max-age=60"})  # the media type guessed from the path


async def preview(request: Request) -> Response:
    site = _site(request)
    start, end = _moment(request)
    v = await run_in_threadpool(site.video_row, request.path_params["video_id"])
    if v.kind == "image":
        raise HTTPException(415, "a photo has no preview clip")
    clip, _ = await run_in_threadpool(site.cache.preview, v, start, end, site.files)
    return OpenFileResponse(clip, media_type="video/mp4", headers={"Cache-Control": "private, max-age=3600"})


async def thumbnail(request: Request) -> Response:
    opened = await run_in_threadpool(_site(request).thumbnail, request.path_params["track_id"])
    return OpenFileResponse(opened, media_type="image/jpeg", headers={"Cache-Control": "private, max-age=3600"})


async def person_photo(request: Request) -> Response:
    opened = await run_in_threadpool(_site(request).person_photo, request.path_params["photo_id"])
    return OpenFileResponse(opened, media_type="image/jpeg", headers={"Cache-Control": "private, max-age=3600"})


async def frame(request: Request) -> Response:
    opened = await run_in_threadpool(_site(request).frame, request.path_params["sighting_id"])
    return OpenFileResponse(opened, media_type="image/jpeg", headers={"Cache-Control": "private, max-age=3600"})


async def favicon(request: Request) -> Response:
    """/favicon.ico, which browsers ask for whatever the page says: the app's icon."""
    return Response((HERE / "static" / "favicon.svg").read_bytes(), media_type="image/svg+xml",
                    headers={"Cache-Control": "public, max-age=86400"})


async def csrf(request: Request) -> Response:
    """GET /api/csrf: the session's token for scripts (the cookie comes with it), and where to put it."""
    return JsonAnswer({"token": csrf_token(request), "header": CSRF_HEADER, "field": CSRF_FIELD})


# ----- errors --------------------------------------------------------------------------------------
def _error(request: Request, status: int, message: str) -> Response:
    if _wants_json(request) or request.url.path.startswith(("/media/", "/thumbnails/", "/frames/", "/static/")):
        return JsonAnswer({"error": message}, status_code=status)
    return templates.TemplateResponse(request, "error.html", {"data": {"error": message, "status": status}, "token_needed": False},
                                      status_code=status)


async def on_http(request: Request, exc: HTTPException) -> Response:
    return _error(request, exc.status_code, str(exc.detail))


async def on_refused(request: Request, exc: UploadRefused) -> Response:
    response = _error(request, exc.status, str(exc))
    response.headers.update(exc.headers)
    return response


async def on_domain(request: Request, exc: HeadsearchError) -> Response:
    if isinstance(exc, NotFound | PersonNotFound | FileNotServed):
        status = 404
    elif isinstance(exc, JobsBusy):
        status = 503
    elif isinstance(exc, FileChanged):
        status = 409
    elif isinstance(exc, NoHeadFound):
        status = 422
    elif isinstance(exc, LibraryError):
        status = 503
    elif isinstance(exc, MediaError):
        status = 422 if request.method == "POST" else 500
    else:
        status = 400
    return _error(request, status, str(exc))


async def on_unexpected(request: Request, exc: Exception) -> Response:
    """Anything else: one line, with the security headers every answer carries (this answer does not pass the Guard),
    its traceback in the server's log."""
    log.error("%s %s: unexpected error", printable(request.method), printable(request.url.path), exc_info=exc)
    response = _error(request, 500, f"unexpected error ({type(exc).__name__}); the server's log has the details")
    response.headers.update(SECURITY_HEADERS)
    return response


def create_app(library: Path, token: str | None = None, cache_dir: Path | None = None, model: str | None = None,
               allowed_hosts: set[str] | None = None, max_upload: int | None = None, upload_slots: int | None = None) -> Starlette:
    """The web app for one library (opened read-only here; a missing or newer library raises LibraryError)."""
    site = Site(library, cache_dir, model)
    pid = "{person_id:id}"
    routes = [
        Route("/", search_form, methods=["GET"]),
        Route("/", search, methods=["POST"]),
        Route("/api/query", search, methods=["POST"]),
        Route("/api/csrf", csrf, methods=["GET"]),
        Route("/favicon.ico", favicon, methods=["GET"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    for prefix in ("", "/api"):
        routes += [
            Route(f"{prefix}/videos", videos),
            Route(f"{prefix}/videos/{{video_id:id}}", video),
            Route(f"{prefix}/tracks/{{track_id:id}}", track),
            Route(f"{prefix}/people", people),
            Route(f"{prefix}/people/{pid}", person),
            Route(f"{prefix}/people/{pid}/export" + (".{fmt:str}" if not prefix else ""), person_export),
            Route(f"{prefix}/exports/{{key:str}}" + (".{fmt:str}" if not prefix else ""), search_export),
            Route(f"{prefix}/inbox", inbox),
            Route(f"{prefix}/watch/{{video_id:id}}", watch),
            Route(f"{prefix}/people/update", people_update, methods=["POST"]),
            Route(f"{prefix}/people/{pid}/name", person_name, methods=["POST"]),
            Route(f"{prefix}/people/{pid}/hide", person_hide, methods=["POST"]),
            Route(f"{prefix}/people/{pid}/merge", person_merge, methods=["POST"]),
            Route(f"{prefix}/people/{pid}/split", person_split, methods=["POST"]),
            Route(f"{prefix}/tracks/{{track_id:id}}/not-this-person", track_not_this_person, methods=["POST"]),
            Route(f"{prefix}/tracks/{{track_id:id}}/move", track_move, methods=["POST"]),
            Route(f"{prefix}/people/{pid}/different", person_different, methods=["POST"]),
            Route(f"{prefix}/people/{pid}/forget", person_forget, methods=["POST"]),
            *redaction_routes(prefix),
            *job_routes(prefix),
        ]
    routes += [
        Route("/media/{video_id:id}", media),
        Route("/videos/{video_id:id}/who.vtt", video_cues),
        Route("/videos/{video_id:id}/chapters.vtt", video_cues),
        Route("/media/{video_id:id}/preview", preview),
        Route("/thumbnails/{track_id:id}.jpg", thumbnail),
        Route("/frames/{sighting_id:id}.jpg", frame),
        Route("/person-photos/{photo_id:id}.jpg", person_photo),
        *job_file_routes(),
    ]
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            site.jobs.close()  # the app stops: its jobs' files go

    app = Starlette(routes=routes, middleware=[Middleware(Guard)], lifespan=lifespan,
                    exception_handlers={HTTPException: on_http, UploadRefused: on_refused, HeadsearchError: on_domain,
                                        Exception: on_unexpected})
    app.state.site = site
    app.state.token = checked_token(token)
    app.state.backoff = Backoff()
    app.state.allowed_hosts = allowed_hosts
    limits = MediaLimits.from_env()
    app.state.max_upload = max_upload if max_upload is not None else limits.max_upload_bytes  # $HEADSEARCH_MAX_UPLOAD_BYTES
    app.state.max_clip_upload = limits.max_upload_clip_bytes  # a clip to compare: $HEADSEARCH_MAX_UPLOAD_CLIP_BYTES
    app.state.upload_slots = UploadSlots() if upload_slots is None else UploadSlots(upload_slots)
    app.state.csrf = SessionTokens()
    return app

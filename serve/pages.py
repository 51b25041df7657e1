"""What the web app's handlers share (`serve.app`'s, `serve.redaction_routes`' and `serve.job_routes`'): the JSON answer, the templates and
their filters, a page or its /api twin, the site of a request, a form's fields once its token is checked, an id field."""
from __future__ import annotations

from pathlib import Path

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.templating import Jinja2Templates

from headsearch.basics.json_text import json_text
from headsearch.basics.text import counted, shown_bytes
from headsearch.basics.timeline import format_time, seek_text
from serve.guard import CSRF_FIELD, csrf_token, require_csrf_token
from serve.uploads import read_form
from serve.views import NotFound, Site

HERE = Path(__file__).resolve().parent
MAX_ID = 2**63 - 1  # DuckDB's BIGINT, the type of every id


class JsonAnswer(JSONResponse):
    """A JSON answer in the CLI's JSON (`headsearch.basics.json_text`: numpy values included), compact."""

    def render(self, content: object) -> bytes:
        # A file name's byte that is not UTF-8 (a lone surrogate) goes out as JSON's own escape of it, "\udce9", as --json gives it.
        text = json_text(content, None, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return text.encode("utf-8", "backslashreplace")


def parse_id(raw: str) -> int | None:
    """A decimal id, or None when it is no whole number within BIGINT (it names nothing in the library)."""
    raw = raw.strip()
    if not raw.isascii() or not raw.isdigit() or len(raw.lstrip("0")) > 19:  # also keeps int() off 4,300-digit strings
        return None
    value = int(raw)
    return value if value <= MAX_ID else None


def hms(seconds: float | None) -> str:
    """Seconds as h:mm:ss.mmm, as players show a position."""
    return format_time(seconds or 0.0)


templates = Jinja2Templates(directory=str(HERE / "templates"))
templates.env.filters["hms"] = hms
templates.env.filters["counted"] = counted
templates.env.filters["seek"] = seek_text
templates.env.filters["basename"] = lambda p: Path(str(p)).name
templates.env.finalize = lambda value: shown_bytes(value) if type(value) is str else value  # not Markup: kept safe


def site_of(request: Request) -> Site:
    return request.app.state.site


def wants_json(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def page(request: Request, template: str, data: dict, status: int = 200) -> Response:
    if wants_json(request):
        return JsonAnswer(data, status_code=status)
    return templates.TemplateResponse(request, template, {"data": data, "token_needed": request.app.state.token is not None,
                                                          "csrf": csrf_token(request), "csrf_field": CSRF_FIELD}, status_code=status)


def id_field(raw: object, what: str) -> int:
    """An id given in a form, JSON body or query string: 400 when it is no number, 404 past BIGINT."""
    text = str(raw).strip()
    if not text.isascii() or not text.isdigit():
        raise HTTPException(400, f"{what} must be a {what} id")
    value = parse_id(text)
    if value is None:
        raise NotFound(f"no {what} {text[:20]}{'...' if len(text) > 20 else ''} (ids are below 2^63)")
    return value


async def form_fields(request: Request) -> dict:
    """The fields of a correction (a form or a JSON object, at most a few KiB), once its session token is checked."""
    fields = await read_form(request)
    require_csrf_token(request, fields)
    return fields

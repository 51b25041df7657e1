"""Who may ask the web app for what.

- Host names: on the loopback only the loopback's names (a DNS-rebinding page names its own host).
- Off the loopback every request carries the token `headsearch serve --token` printed (a cookie once
  the address with `?token=` was opened, or `Authorization: Bearer TOKEN`).
- A request that changes something (every method but GET and HEAD) must come from the app's own pages:
  its Origin (or, without one, its Referer) names this host (`null`, sent by sandboxed frames and
  data: or file: pages, is refused, and so is a request that names neither), and it carries the
  session's CSRF token, in the form field `csrf` or the header `X-CSRF-Token`. The session is a random
  cookie; its token is an HMAC of it under a key this process draws at start (so a cookie planted by
  another page on 127.0.0.1 is worth nothing, and a restart asks open pages to be reloaded), and the
  pages carry it in their forms. Scripts get it, with the cookie, from GET /api/csrf.
- POST /api/query, a search that changes nothing, needs no token, so scripts post photos to it as
  `query --json` would answer (and so does POST /api/compare, as `compare --json` answers); browsers still cannot post to it from another site (an Origin or
  Referer naming another host, or `null`, is refused), and without CORS headers no other site can read
  its answer.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from starlette.exceptions import HTTPException
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse

TOKEN_COOKIE = "headsearch_token"
SESSION_COOKIE = "headsearch_session"
CSRF_FIELD = "csrf"
CSRF_HEADER = "X-CSRF-Token"
READ_ONLY_METHODS = frozenset({"GET", "HEAD"})
OPEN_POSTS = frozenset({"/api/query", "/api/compare"})  # no state change: no token needed (see the module's docstring)
MAX_SESSION = 128  # characters of a session cookie looked at


class SessionTokens:
    """CSRF tokens: an HMAC of the session cookie under a key of this process."""

    def __init__(self, key: bytes | None = None):
        self._key = key or secrets.token_bytes(32)

    def token(self, session: str) -> str:
        return hmac.new(self._key, session.encode(), hashlib.sha256).hexdigest()

    def valid(self, session: str, given: str) -> bool:
        """Whether `given` is the session's token (compared in constant time)."""
        return bool(session) and hmac.compare_digest(self.token(session).encode(), given.encode("utf-8", "replace"))


def _session(request: Request) -> str:
    session = request.cookies.get(SESSION_COOKIE, "")
    return session if 16 <= len(session) <= MAX_SESSION else ""


def foreign_origin(request: Request, required: bool = True) -> str | None:
    """Why a request that changes something does not come from this app's own pages, or None when it
    does: its Origin, else its Referer, must name this host; without either, it is refused when `required`."""
    host = request.headers.get("host", "").lower()
    origin = request.headers.get("origin")
    if origin is not None:
        if origin.strip().lower() == "null":
            return "cross-site request refused: it comes from a page without an origin (a sandboxed frame, a data: or file: page)"
        if urlsplit(origin).netloc.lower() != host:
            return f"cross-site request refused: it comes from {origin[:100]}, not from this app"
        return None
    referer = request.headers.get("referer")
    if referer is not None:
        if urlsplit(referer).netloc.lower() != host:
            return "cross-site request refused: it comes from a page of another site"
        return None
    if required:
        return (f"request refused: it names no origin; the app's pages send one, scripts send `Origin: http://{host}` "
                f"and the `{CSRF_HEADER}` header (GET /api/csrf)")
    return None


def require_csrf_token(request: Request, fields: dict) -> None:
    """Refuse (403) a request that changes something without its session's token (header, or form or JSON field)."""
    given = request.headers.get(CSRF_HEADER) or fields.get(CSRF_FIELD) or ""
    if not isinstance(given, str) or not request.app.state.csrf.valid(_session(request), given):
        raise HTTPException(403, "the page's security token is missing or out of date (was the server restarted?): "
                                 "reload the page and try again")


def csrf_token(request: Request) -> str:
    """This request's session token (what the pages put in their forms)."""
    return request.state.csrf


class Guard(BaseHTTPMiddleware):
    """Host names, the token off the loopback, the same-origin check on every request that changes
    something, and the session cookie behind the CSRF tokens."""

    async def dispatch(self, request: Request, call_next):
        state = request.app.state
        hosts = state.allowed_hosts
        if hosts is not None and (request.url.hostname or "") not in hosts:
            return PlainTextResponse("unknown host name", status_code=400)
        if state.token is not None:
            given = request.query_params.get("token") or request.cookies.get(TOKEN_COOKIE) or ""
            auth = request.headers.get("authorization", "")
            if auth.lower().startswith("bearer "):
                given = auth[7:].strip()
            if not hmac.compare_digest(given.encode(), state.token.encode()):
                return PlainTextResponse("a token is needed: open the address `headsearch serve` printed", status_code=401)
        if request.method not in READ_ONLY_METHODS:
            why = foreign_origin(request, required=request.url.path not in OPEN_POSTS)
            if why is not None:
                return PlainTextResponse(why, status_code=403)
        session = _session(request)
        fresh = not session
        if fresh:
            session = secrets.token_urlsafe(32)
        request.state.csrf = state.csrf.token(session)
        response = await call_next(request)
        if fresh:
            response.set_cookie(SESSION_COOKIE, session, httponly=True, samesite="lax", path="/")
        if state.token is not None and request.query_params.get("token"):
            response.set_cookie(TOKEN_COOKIE, state.token, httponly=True, samesite="strict")
        return response

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
import logging
import secrets
import threading
import time
import unicodedata
from urllib.parse import urlsplit

from starlette.exceptions import HTTPException
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from headsearch.basics.errors import HeadsearchError
from headsearch.basics.text import printable

log = logging.getLogger(__name__)

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
        started = time.perf_counter()
        response = await self._checked(request, call_next)
        response.headers.update(SECURITY_HEADERS)
        if log.isEnabledFor(logging.INFO):
            client = request.client.host if request.client else "-"
            log.info("%s %s %s %d %.0f ms", client, printable(request.method), printable(request.url.path), response.status_code,
                     1000 * (time.perf_counter() - started))
        return response

    async def _checked(self, request: Request, call_next):
        state = request.app.state
        hosts = state.allowed_hosts
        if hosts is not None and (request.url.hostname or "") not in hosts:
            return PlainTextResponse("unknown host name", status_code=400)
        if state.token is not None:
            refused = _token_refused(request, state)
            if refused is not None:
                return refused
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


def _token_refused(request: Request, state) -> Response | None:
    """The response for a request without the right token (None: it has it).

    Wrong tokens are counted by their first TOKEN_PREFIX characters, from whichever address (`Backoff`): past the
    free ones, tokens that begin the same way wait longer after each, the right one too when it begins that way. Only
    a token that begins as the right one can be right, so the guesses that could ever succeed are bounded however many
    addresses send them; and a client's wrong tokens never keep out one that begins otherwise: behind a proxy, where
    every client has the proxy's address, a guesser or a colleague's typos do not lock the others out. Only wrong
    tokens sharing the right one's first characters (the user's own typos, or a guesser who hit them by chance,
    without being able to tell) slow the right one down. Each wrong token is logged with its address."""
    given = request.query_params.get("token") or request.cookies.get(TOKEN_COOKIE) or ""
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        given = auth[7:].strip()
    if not given:
        return PlainTextResponse("a token is needed: open the address `headsearch serve` printed", status_code=401)
    client = request.client.host if request.client else "-"
    key = given[:TOKEN_PREFIX]
    wait = state.backoff.wait(key)
    if wait > 0:
        return PlainTextResponse(f"too many wrong tokens beginning like this one: try again in {wait:.0f} s", status_code=429,
                                 headers={"Retry-After": str(max(1, round(wait)))})
    if not hmac.compare_digest(given.encode("utf-8", "replace"), state.token.encode()):
        n = state.backoff.failed(key)
        log.warning("wrong token from %s (%d in a row beginning the same way): %s %s", client, n, printable(request.method),
                    printable(request.url.path))
        return PlainTextResponse("a token is needed: open the address `headsearch serve` printed", status_code=401)
    state.backoff.succeeded(key)
    return None


TOKEN_PREFIX = 4  # characters: wrong tokens are counted by how they begin (see `_token_refused`)


class Backoff:
    """Wrong tokens by key (how they begin): the first `free` cost nothing, each one after doubles the wait before the
    next try (from `first_wait_s`, at most `max_wait_s`); the right token clears its key's count. At most `keys` keys
    are kept (the oldest forgotten first)."""

    def __init__(self, free: int = 5, first_wait_s: float = 1.0, max_wait_s: float = 300.0, keys: int = 100_000):
        self.free, self.first, self.max, self.keys = free, first_wait_s, max_wait_s, keys
        self._failures: dict[str, tuple[int, float]] = {}  # key -> (wrong tokens in a row, monotonic time of the last)
        self._lock = threading.Lock()

    def wait(self, key: str) -> float:
        with self._lock:
            n, last = self._failures.get(key, (0, 0.0))
        if n < self.free:
            return 0.0
        return max(0.0, last + min(self.max, self.first * 2 ** (n - self.free)) - time.monotonic())

    def failed(self, key: str) -> int:
        with self._lock:
            n = self._failures.pop(key, (0, 0.0))[0] + 1
            self._failures[key] = (n, time.monotonic())  # last in the order: the oldest are forgotten first
            if len(self._failures) > self.keys:
                self._failures.pop(next(iter(self._failures)))
            return n

    def succeeded(self, key: str) -> None:
        with self._lock:
            self._failures.pop(key, None)


MIN_TOKEN = 16  # characters
MIN_DISTINCT = 8  # different characters in a token: 16 times the same one is no secret
MIN_CLASSES = 2  # of lower-case letters, upper-case letters, digits and other signs


def checked_token(token: str | None) -> str | None:
    """A token `serve` may use: None (none asked), or at least MIN_TOKEN visible characters, none of them blank, of at
    least MIN_DISTINCT different characters from at least MIN_CLASSES classes; else one line."""
    if token is None:
        return None
    if not token.strip() or any(c.isspace() for c in token):
        raise HeadsearchError("--token: a token of blanks, or with blanks in it, is refused (give one of at least "
                              f"{MIN_TOKEN} characters, or none: `serve` makes a strong one)")
    if any(not c.isprintable() or unicodedata.category(c) in ("Cf", "Mn", "Me") for c in token):
        raise HeadsearchError("--token: a token with invisible characters (zero-width, control or combining ones) is refused: "
                              "it cannot be typed again or told from another (give visible characters, or none: `serve` makes a strong one)")
    if len(token) < MIN_TOKEN:
        raise HeadsearchError(f"--token: {len(token)} character{'s' if len(token) != 1 else ''} is too short to keep a guesser out "
                              f"(at least {MIN_TOKEN}; or give none: `serve` makes a strong one)")
    classes = {"lower" if c.islower() else "upper" if c.isupper() else "digit" if c.isdigit() else "sign" for c in token}
    if len(set(token)) < MIN_DISTINCT or len(classes) < MIN_CLASSES:
        raise HeadsearchError(f"--token: too easy to guess ({len(set(token))} different characters of {len(classes)} kind"
                              f"{'s' if len(classes) != 1 else ''}; at least {MIN_DISTINCT} different ones, mixing at least "
                              f"{MIN_CLASSES} of lower-case, upper-case, digits and signs; or give none: `serve` makes a strong one)")
    return token


def strong_token() -> str:
    return secrets.token_urlsafe(24)


# Every response: no script but the app's own file, no framing, no type guessing, no address to other sites.
SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
                                "media-src 'self' blob:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}

"""Request bodies the web app reads, bounded: query photos and the small forms of corrections.

A query photo streams to a temporary file (deleted when its request is done), never whole in memory
while it arrives; it is refused (413) as soon as it is known to pass the cap: at once when its
Content-Length says so, else at the first byte past it. At most `UPLOAD_SLOTS` large uploads are read at a
time, at most half of them from one client; one more takes the slot of the slowest upload still arriving slower
than FAIR_RATE past GRACE_S (dropped, 408), else is answered 503 with Retry-After at once, not queued: slow bodies
never keep a search's own upload waiting, whatever its size. A body declared small (an ordinary photo) takes no
slot; and a body that stalls (nothing for IDLE_S) or trickles (slower than MIN_RATE past GRACE_S) is dropped (408). The photo's header
is checked before anything decodes it (a small PNG can claim to be 100,000 x 100,000 pixels).
"""
from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.types import Message, Receive

from headsearch.basics.media import IMAGE_FORMATS  # one rule for what is a photo (headsearch.basics.media)

UPLOAD_SLOTS = 4  # large uploads read at once (at most half of them from one client); searches run one at a time
UPLOAD_SECONDS = 120.0  # an upload must arrive within this
SMALL_BODY = 1 << 20  # a body declared this small takes no slot
IDLE_S = 10.0  # a body that sends nothing this long is dropped
GRACE_S = 5.0  # ...and past this, one slower than MIN_RATE
MIN_RATE = 32 * 1024  # bytes a second
FAIR_RATE = 256 * 1024  # bytes a second: an upload slower than this (past GRACE_S) gives its slot to one that waits
RETRY_AFTER_S = 2
FORM_LIMIT = 64 * 1024  # the body of a correction: a name, a few ids
HEADER_BYTES = 1 << 20  # what the header check reads of a photo (Pillow reads the file itself for other formats)


def mib(n: float) -> str:
    """Bytes in MiB, as the cap is set (20 MiB, 1.9 MiB)."""
    return f"{n / 2**20:.1f}".removesuffix(".0") + " MiB"


class UploadRefused(Exception):
    """A request body the app will not look at; carries the HTTP status, one line for the user, and headers."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


@dataclass(eq=False)
class Reading:
    """A large upload holding a slot: what has arrived, since when; `arrived` once its body is whole."""

    client: str
    started: float
    received: int = 0
    arrived: bool = False
    scope: anyio.CancelScope | None = None

    def rate(self, now: float) -> float:
        return self.received / max(now - self.started, 1e-6)


class UploadSlots:
    """At most `slots` large uploads at a time, at most `per_client` of them from one client. One more takes the slot
    of the slowest upload still arriving, past GRACE_S, slower than FAIR_RATE (dropped: 408), else is refused at once
    (503, Retry-After) rather than queued. A body declared no larger than `SMALL_BODY` takes no slot."""

    def __init__(self, slots: int = UPLOAD_SLOTS, per_client: int | None = None):
        self.slots = slots
        self.per_client = per_client if per_client is not None else max(1, slots // 2)
        self._readings: list[Reading] = []  # the uploads holding a slot

    @property
    def free(self) -> int:
        return self.slots - len(self._readings)

    @contextlib.asynccontextmanager
    async def hold(self, client: str = "-", declared: int | None = None) -> AsyncIterator[Reading | None]:
        if declared is not None and declared <= SMALL_BODY:
            yield None
            return
        # one event loop: nothing runs between these tests and the counts below
        held = sum(r.client == client for r in self._readings)
        if held >= self.per_client or (self.free <= 0 and not self._drop_slowest()):
            why = f"{held} of yours are" if held >= self.per_client and self.free > 0 else f"{self.slots} uploads are"
            raise UploadRefused(503, f"busy: {why} being read; try again in a moment", {"Retry-After": str(RETRY_AFTER_S)})
        reading = Reading(client, time.monotonic())
        self._readings.append(reading)
        try:
            with anyio.CancelScope() as reading.scope:
                yield reading
            if reading.scope.cancelled_caught:
                raise UploadRefused(408, f"upload too slow ({reading.rate(time.monotonic()) / 1024:.0f} KiB/s, at least "
                                         f"{FAIR_RATE // 1024} KiB/s while others wait): its slot went to another upload")
        finally:
            self._release(reading)

    def _drop_slowest(self) -> bool:
        """Give the slot of the slowest upload still arriving slower than FAIR_RATE past GRACE_S to the one asking."""
        now = time.monotonic()
        slow = [r for r in self._readings if not r.arrived and now - r.started > GRACE_S and r.rate(now) < FAIR_RATE]
        if not slow:
            return False
        dropped = min(slow, key=lambda r: r.rate(now))
        self._release(dropped)
        dropped.scope.cancel()
        return True

    def _release(self, reading: Reading) -> None:
        if reading in self._readings:  # not yet: a dropped upload's slot was given away when it was dropped
            self._readings.remove(reading)


def _client(request: Request) -> str:
    return request.client.host if request.client else "-"


def _declared(request: Request) -> int | None:
    declared = request.headers.get("content-length", "")
    return int(declared) if declared.isdigit() else None


def refuse_declared(request: Request, limit: int, what: str = "upload") -> None:
    """413 at once when the request's Content-Length passes `limit`."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise UploadRefused(413, f"{what} too large ({mib(int(declared))}; at most {mib(limit)})")


def capped(request: Request, limit: int, what: str = "upload", reading: Reading | None = None) -> Request:
    """The request, reading its body through a counter that refuses the first byte past `limit` (413), a body that
    sends nothing for IDLE_S (408), and one that, past its first GRACE_S, arrives slower than MIN_RATE (408); what
    arrives is counted in its slot's `reading`."""
    size = 0
    started = time.monotonic()
    receive: Receive = request.receive

    async def counted() -> Message:
        nonlocal size
        try:
            with anyio.fail_after(IDLE_S):
                message = await receive()
        except TimeoutError as e:
            raise UploadRefused(408, f"{what} stalled: nothing received for {IDLE_S:.0f} s") from e
        if message["type"] == "http.request":
            size += len(message.get("body", b""))
            if reading is not None:
                reading.received = size
            if size > limit:
                raise UploadRefused(413, f"{what} too large (more than {mib(limit)})")
            elapsed = time.monotonic() - started
            if elapsed > GRACE_S and message.get("more_body") and size < MIN_RATE * elapsed:
                raise UploadRefused(408, f"{what} too slow: {size / elapsed / 1024:.0f} KiB/s, at least {MIN_RATE // 1024} KiB/s")
        return message

    return Request(request.scope, counted)


async def read_form(request: Request, limit: int = FORM_LIMIT) -> dict:
    """The fields of a small form or JSON object (a correction), refused past `limit` bytes."""
    refuse_declared(request, limit, "request")
    body = capped(request, limit, "request")
    if request.headers.get("content-type", "").startswith("application/json"):
        try:
            data = json.loads(await body.body() or b"{}")
        except ValueError as e:
            raise UploadRefused(400, "the body is not JSON") from e
        return data if isinstance(data, dict) else {}
    form = await body.form(max_files=0, max_fields=20)
    return {k: v for k, v in form.items() if isinstance(v, str)}


@dataclass(frozen=True)
class Photo:
    """A query photo received: its temporary file (gone once the request is done; None when the form sent no photo but
    the id of a kept one, `photo_id`), its name, the other fields."""

    path: Path | None
    name: str
    fields: dict[str, str]


@contextlib.asynccontextmanager
async def received_photo(request: Request, limit: int, slots: UploadSlots) -> AsyncIterator[Photo]:
    """The photo of a query request (a multipart form, field `photo`, or a raw image body with the fields
    in the query string), in a temporary file deleted on leaving, its header checked."""
    refuse_declared(request, limit)
    fields = dict(request.query_params)
    async with slots.hold(_client(request), _declared(request)) as reading:
        with tempfile.NamedTemporaryFile(prefix="headsearch-upload-", suffix=".part") as file:
            try:
                with anyio.fail_after(UPLOAD_SECONDS):
                    if request.headers.get("content-type", "").startswith("multipart/form-data"):
                        name = await _form_photo(capped(request, limit, reading=reading), file, fields)
                    else:
                        async for chunk in capped(request, limit, reading=reading).stream():
                            file.write(chunk)
                        name = fields.get("name", "photo")
            except TimeoutError as e:
                raise UploadRefused(408, f"upload too slow: not received within {UPLOAD_SECONDS:.0f} s") from e
            if reading is not None:
                reading.arrived = True  # whole: its slot is no longer one to take
            file.flush()
            if name is None:  # no photo sent: the id of one the app kept
                yield Photo(None, "", fields)
                return
            path = Path(file.name)
            check_image_file(path)
            yield Photo(path, name, fields)


async def _form_photo(request: Request, file, fields: dict[str, str]) -> str | None:
    """Copy the form's `photo` into `file` (Starlette spools it to disk past 1 MiB); its other fields into `fields`.
    None: no photo, but the id of one the app kept (`photo_id`: the page's options search the last photo again)."""
    form = await request.form(max_files=1, max_fields=20)
    try:
        photo = form.get("photo")
        for key, value in form.multi_items():
            if isinstance(value, str):
                fields[key] = value
        if fields.get("photo_id") and (not isinstance(photo, UploadFile) or not photo.filename):
            return None
        if not isinstance(photo, UploadFile):
            raise UploadRefused(400, "no photo in the form (field `photo`)")
        photo.file.seek(0)
        await run_in_threadpool(shutil.copyfileobj, photo.file, file, 1 << 20)
        return photo.filename or "photo"
    finally:
        await form.close()


def check_image_file(path: Path) -> tuple[int, int]:
    """`check_image` of a photo in a file, reading its first bytes only."""
    with open(path, "rb") as f:
        head = f.read(HEADER_BYTES)
    return check_image(head, path)


def check_image(data: bytes, path: Path | None = None) -> tuple[int, int]:
    """Refuse what is not an image, and images too large to decode safely; returns (width, height).
    Reads the header only (`headsearch.basics.images.image_header`, from `path` when `data` is only
    the file's start): nothing is decoded here."""
    import numpy as np

    from headsearch.basics.errors import MediaError
    from headsearch.basics.images import image_header
    from headsearch.basics.settings import MediaLimits

    if not data:
        raise UploadRefused(400, "empty upload: send a photo")
    limits = MediaLimits.from_env()
    try:
        header = image_header(np.frombuffer(data, np.uint8), limits, path)
    except MediaError as e:  # Pillow's own bound on pixels (a decompression bomb)
        raise UploadRefused(413, f"image refused: too many pixels ({e})") from e
    if header is None:
        raise UploadRefused(415, "not an image (JPEG, PNG, WebP, BMP, TIFF or GIF expected)")
    if header.format not in IMAGE_FORMATS:
        raise UploadRefused(415, f"not a photo format this app takes ({header.format})")
    w, h = header.width, header.height
    if w * h > limits.max_upload_pixels or min(w, h) < limits.min_side:
        raise UploadRefused(413, f"image refused: {w}x{h} pixels (at most {limits.max_upload_pixels / 1e6:.0f} megapixels, "
                                 f"at least {limits.min_side} pixels a side)")
    return w, h


@dataclass(frozen=True)
class CompareUpload:
    """A compare request received: the reference photo, the clip where one was sent (else a library video's id in the
    fields), each in a temporary file gone once the request is done."""

    photo: Photo
    clip: Path | None
    clip_name: str | None


@contextlib.asynccontextmanager
async def received_compare(request: Request, limit: int, slots: UploadSlots) -> AsyncIterator[CompareUpload]:
    """The multipart form of a comparison: field `photo` (a reference photo, its header checked), and either `clip` (a
    video file) or `video_id`; both files together within `limit` bytes."""
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise UploadRefused(400, "send a multipart form: `photo`, and `clip` or `video_id`")
    refuse_declared(request, limit)
    async with slots.hold(_client(request), _declared(request)) as reading:
        with tempfile.NamedTemporaryFile(prefix="headsearch-upload-", suffix=".part") as photo_file, \
                tempfile.NamedTemporaryFile(prefix="headsearch-clip-", suffix=".part") as clip_file:
            fields: dict[str, str] = {}
            try:
                with anyio.fail_after(UPLOAD_SECONDS):
                    form = await capped(request, limit, reading=reading).form(max_files=2, max_fields=20)
                    try:
                        names = {}
                        for key, value in form.multi_items():
                            if isinstance(value, str):
                                fields[key] = value
                            elif key in ("photo", "clip") and value.filename:
                                value.file.seek(0)
                                await run_in_threadpool(shutil.copyfileobj, value.file, photo_file if key == "photo" else clip_file, 1 << 20)
                                names[key] = value.filename
                    finally:
                        await form.close()
            except TimeoutError as e:
                raise UploadRefused(408, f"upload too slow: not received within {UPLOAD_SECONDS:.0f} s") from e
            if reading is not None:
                reading.arrived = True
            cast = fields.get("cast") == "people"  # the library's named people as the cast: no photo needed
            if "photo" not in names and not cast:
                raise UploadRefused(400, "no reference photo in the form (field `photo`; or `cast` = people)")
            photo_file.flush()
            clip_file.flush()
            if "photo" in names:
                check_image_file(Path(photo_file.name))
            clip = Path(clip_file.name) if "clip" in names else None
            photo = Path(photo_file.name) if "photo" in names else None
            yield CompareUpload(Photo(photo, names.get("photo", ""), fields), clip, names.get("clip"))

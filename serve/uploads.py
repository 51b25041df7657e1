"""Query photos sent to the web app: read with a size cap, checked to be an image of sane dimensions
before anything decodes it (a small PNG can claim to be 100,000 x 100,000 pixels)."""
from __future__ import annotations

from starlette.datastructures import UploadFile
from starlette.requests import Request

from headsearch.basics.media import IMAGE_FORMATS  # one rule for what is a photo (headsearch.basics.media)


class UploadRefused(Exception):
    """An upload the app will not look at; carries the HTTP status and one line for the user."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


async def read_capped_body(request: Request, limit: int) -> bytes:
    """The request body, refused (413) as soon as it is known to pass `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise UploadRefused(413, f"upload too large ({int(declared) / 1e6:.1f} MB; at most {limit / 1e6:.0f} MB)")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise UploadRefused(413, f"upload too large (more than {limit / 1e6:.0f} MB)")
        chunks.append(chunk)
    return b"".join(chunks)


def replay(body: bytes):
    """An ASGI `receive` that hands an already read body to a new Request (to parse a form from it)."""
    sent = False

    async def receive():
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


async def query_upload(request: Request, limit: int) -> tuple[bytes, str, dict[str, str]]:
    """The photo of a query request and its other fields: a multipart form (field `photo`) or a raw
    image body with the fields in the query string."""
    body = await read_capped_body(request, limit)
    fields = {k: v for k, v in request.query_params.items()}
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        form = await Request(request.scope, replay(body)).form(max_files=1, max_fields=20)
        try:
            photo = form.get("photo")
            for key, value in form.multi_items():
                if isinstance(value, str):
                    fields[key] = value
            if not isinstance(photo, UploadFile):
                raise UploadRefused(400, "no photo in the form (field `photo`)")
            data, name = await photo.read(), photo.filename or "photo"
        finally:
            await form.close()
    else:
        data, name = body, fields.get("name", "photo")
    check_image(data)
    return data, name, fields


def check_image(data: bytes) -> tuple[int, int]:
    """Refuse what is not an image, and images too large to decode safely; returns (width, height).
    Reads the header only (`headsearch.basics.images.image_header`): nothing is decoded here."""
    import numpy as np

    from headsearch.basics.errors import MediaError
    from headsearch.basics.images import image_header
    from headsearch.basics.settings import MediaLimits

    if not data:
        raise UploadRefused(400, "empty upload: send a photo")
    limits = MediaLimits.from_env()
    try:
        header = image_header(np.frombuffer(data, np.uint8), limits)
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

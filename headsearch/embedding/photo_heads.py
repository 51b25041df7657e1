"""A photo's heads and their vectors: the one road from a photo to the heads to search or compare with (the CLI,
the web app, people's reference photos, the benchmarks and `compare` all take it).

`photo_heads` finds and cuts the heads (the largest, every one numbered left to right, or the whole photo as the
head); `PhotoEmbedder` adds the vectors of one model, loaded once, and for a library the library's own model,
checked against the vectors it holds."""
from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from headsearch.basics.errors import HeadsearchError, NoHeadFound
from headsearch.basics.images import decode_image_rgb, read_image_rgb
from headsearch.basics.settings import IndexSettings
from headsearch.detection.crops import HeadCrop, crop_head, whole_image_crop
from headsearch.detection.faces import FaceDetector, detect_photo_heads
from headsearch.models.base import Embedder
from headsearch.models.registry import load_embedder
from headsearch.store.layout import check_model, existing_model  # not the store's database code: it loads meanwhile
from schemas.records import Box, VectorKind

CROP_PX = IndexSettings.crop_px  # query head crops are cut as the indexer cuts them


@dataclass(frozen=True)
class QueryHead:
    """One head of the query photo: its number (left to right), where it is, its crop."""

    number: int
    box: Box  # in the photo's pixels (the whole head: it may reach outside the photo)
    face_visible: bool
    crop: HeadCrop
    image_size: tuple[int, int] = (0, 0)  # the photo's (width, height)
    heads_in_photo: int = 1  # heads found in the photo (more than 1 where only the largest is searched)


@dataclass(frozen=True)
class EmbeddedHead:
    """A head of a photo with its vectors (kind -> (dim,) unit vector; a face-recognition model gives no identity
    vector to a head without a face)."""

    head: QueryHead
    vectors: dict[VectorKind, np.ndarray]


def photo_pixels(photo: Path | bytes, name: str | Path | None = None) -> np.ndarray:
    """A query photo (a file, or an upload's bytes named `name`) as RGB pixels, within the media limits."""
    if isinstance(photo, bytes | bytearray):
        return decode_image_rgb(photo, name or "upload")
    return read_image_rgb(Path(photo))


def photo_heads(rgb: np.ndarray, name: Path | str, detector: FaceDetector, embedder: Embedder, all_heads: bool = False,
                whole_image: bool = False, crop_px: int = CROP_PX) -> list[QueryHead]:
    """The heads to search with: the largest one, every one (numbered left to right), or the whole
    photo as the head. A face-recognition model cannot search with a photo without a face.
    `name` names the photo in messages."""
    h, w = rgb.shape[:2]
    if whole_image:
        faces = detector.detect(rgb)
        face = max(faces, key=lambda f: f.box.area) if faces else None
        if face is None and not embedder.sees_whole_head:
            raise NoHeadFound(f"{name}: --whole-image with {embedder.name}, a face-recognition model: there is no face in this "
                              "photo for it to see (only a model that sees whole heads can search with the back of a head)")
        side = min(h, w)
        box = Box((w - side) / 2, (h - side) / 2, (w + side) / 2, (h + side) / 2)
        return [QueryHead(1, box, face is not None, whole_image_crop(rgb, face, crop_px), (w, h))]
    heads = detect_photo_heads(detector, rgb)
    if not heads:
        raise NoHeadFound(f"{name}: no head found (if the photo is already a head crop, e.g. the back of a head, use --whole-image)")
    found = len(heads)
    if not all_heads:
        heads = heads[:1]
    heads = sorted(heads, key=lambda d: d.head.center[0])  # numbered as a reader sees them: left to right
    return [QueryHead(i, d.head, d.face is not None, crop_head(rgb, d.head, d.face, crop_px), (w, h), found)
            for i, d in enumerate(heads, 1)]


class PhotoEmbedder:
    """Photos into one model's vectors. The model (a name or a file, default: the default model) and the face
    detector load on first use, or in the background from `start_loading`, and are kept. With `library_root`, the
    model defaults to the one that made the library (its manifest says which) and another is refused
    (`ModelMismatch`) when used, since a library's vectors are only comparable with vectors of its model."""

    def __init__(self, model: str | None = None, library_root: Path | None = None, embedder: Embedder | None = None,
                 detector: FaceDetector | None = None):
        self.library_root = Path(library_root) if library_root is not None else None
        self.made_by = existing_model(self.library_root) if self.library_root is not None else None  # no database read
        self._model = model or (self.made_by.source if self.made_by is not None else None)
        self._embedder = embedder
        self._detector = detector
        self._loading: threading.Thread | None = None
        self._failed: BaseException | None = None
        self._checked = False  # the model checked against the library
        self._load_lock = threading.Lock()  # concurrent searches load the models once

    def start_loading(self, photo: Path | None = None, all_heads: bool = False,
                      whole_image: bool = False) -> Future[list[EmbeddedHead]] | None:
        """Load the model and the detector in a thread while the caller goes on (ONNX Runtime makes its sessions
        without holding the GIL), and find the heads of `photo` there too (a cold query does both while the library's
        code loads): their future, which raises what finding them raised; None without a photo."""
        found: Future[list[EmbeddedHead]] | None = Future() if photo is not None else None

        def work() -> None:
            try:
                self._load_models()
            except BaseException as e:  # noqa: BLE001 - raised by `load`, in the caller's thread
                self._failed = e
                if found is not None:
                    found.set_exception(e)
                return
            if found is not None:
                try:
                    found.set_result(self._find_heads(photo, None, all_heads, whole_image))
                except BaseException as e:  # noqa: BLE001 - raised by the future's `result`, in the caller's thread
                    found.set_exception(e)

        # Not a daemon: a command that fails meanwhile waits for it at exit, never ends the process under it.
        self._loading = threading.Thread(target=work, name="headsearch-models")
        self._loading.start()
        return found

    def _load_models(self) -> None:
        if self._embedder is None:
            self._embedder = load_embedder(self._model)
        if self._detector is None:
            self._detector = FaceDetector()
            self._detector.load()

    def load(self) -> PhotoEmbedder:
        """The model and the detector loaded now (or their loading waited for), the model checked against the library."""
        with self._load_lock:
            return self._load()

    def _load(self) -> PhotoEmbedder:
        if self._loading is not None:
            self._loading.join()
            self._loading = None
            if self._failed is not None:
                failed, self._failed = self._failed, None
                raise failed
        self._load_models()
        if self.made_by is not None and not self._checked:
            check_model(self.library_root, self.made_by, self._embedder.describe())
            self._checked = True
        return self

    @property
    def embedder(self) -> Embedder:
        """The model (ModelMismatch when it is not the library's)."""
        return self.load()._embedder

    @property
    def detector(self) -> FaceDetector:
        return self.load()._detector

    def heads(self, photo: Path | bytes | np.ndarray, name: str | None = None, all_heads: bool = False,
              whole_image: bool = False) -> list[EmbeddedHead]:
        """The heads of a photo (a file, an upload's bytes named `name`, or RGB pixels) with their vectors: the largest
        head, every head numbered left to right (`all_heads`), or the whole photo as the head (`whole_image`)."""
        self.load()
        return self._find_heads(photo, name, all_heads, whole_image)

    def _find_heads(self, photo: Path | bytes | np.ndarray, name: str | None, all_heads: bool, whole_image: bool) -> list[EmbeddedHead]:
        rgb = photo if isinstance(photo, np.ndarray) else photo_pixels(photo, name)
        label = name or (str(photo) if isinstance(photo, str | Path) else "photo")
        found = photo_heads(rgb, label, self._detector, self._embedder, all_heads, whole_image)
        vectors = self._embedder.embed([h.crop for h in found])
        return [EmbeddedHead(h, {kind: np.asarray(v[i], np.float32) for kind, v in vectors.items() if np.any(v[i])})
                for i, h in enumerate(found)]

    def head(self, photo: Path | bytes | np.ndarray, name: str | None = None, number: int | None = None,
             whole_image: bool = False) -> EmbeddedHead:
        """One head of a photo: head `number` (as `query --all` numbers them, left to right), else the only one; a photo
        of several heads without a number is refused, naming how many there are."""
        if whole_image:
            return self.heads(photo, name, whole_image=True)[0]
        heads = self.heads(photo, name, all_heads=True)
        label = name or (str(photo) if isinstance(photo, str | Path) else "photo")
        if number is None:
            if len(heads) > 1:
                raise HeadsearchError(f"{label}: {len(heads)} heads in this photo; pick one with --ref-head N (1-{len(heads)}, "
                                      "numbered left to right as `headsearch query PHOTO --all` shows them)")
            return heads[0]
        if not 1 <= number <= len(heads):
            raise HeadsearchError(f"{label}: no head {number}: the photo has {len(heads)} head{'s' if len(heads) != 1 else ''} (1-{len(heads)})")
        return heads[number - 1]

"""One analysis session, shared by compare, cast and redact (the CLI's, the web app's and bench's): the model and the
face detector (a library's own model where a library is named), the library, the analysis' settings, the bars a head
is judged by (the library's own, else the model's; refused in one line where there are none) and the model's spec, and
the one place a reference is made from photos or from a person of the library."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from headsearch.basics.errors import HeadsearchError, NoHeadFound
from headsearch.basics.images import encode_jpeg
from headsearch.basics.settings import IndexSettings
from headsearch.compare.reference import Reference, ReferenceHead, person_heads, photo_files
from headsearch.detection.crops import picture_of
from headsearch.detection.faces import FaceDetector
from headsearch.embedding.photo_heads import PhotoEmbedder
from headsearch.evaluation.thresholds import Thresholds, thresholds_for
from headsearch.models import Embedder
from headsearch.models.registry import find_spec
from headsearch.store.library import Library

LARGEST = 0  # `photo_head`'s `number` for a photo's largest head (as a query takes a photo), whatever else it shows
PICK_ONE = ("; pick one with --ref-head N (1-{n}, numbered left to right as `headsearch query PHOTO --all` shows them)")
PICTURE_QUALITY = 90  # a reference's picture (its head cut out, JPEG), as the compare pages show it


class AnalysisSession:
    """The model, detector, library, settings and bars one run of compare, cast or redact analyses with (loaded once,
    for many videos and references)."""

    def __init__(self, photos: PhotoEmbedder, library: Library | None = None, settings: IndexSettings | None = None):
        self.photos = photos
        self.library = library
        self.settings = settings or IndexSettings.from_env()
        self._bars: Thresholds | None = None

    @classmethod
    def open(cls, library: Path | None = None, model: str | None = None, settings: IndexSettings | None = None) -> AnalysisSession:
        """With a library (its model, bars, analyses and people), or without (`model`, default: the default model); the
        model loads when first used."""
        settings = settings or IndexSettings.from_env()
        lib = Library.open(library) if library is not None else None
        photos = PhotoEmbedder(model, lib.root if lib is not None else None, detector=FaceDetector.from_settings(settings))
        return cls(photos, lib, settings)

    @property
    def embedder(self) -> Embedder:
        """The model (refused when it is not the library's own)."""
        return self.photos.embedder

    @property
    def detector(self) -> FaceDetector:
        return self.photos.detector

    @property
    def library_root(self) -> Path | None:
        return self.library.root if self.library is not None else self.photos.library_root

    @property
    def appearance_dims(self) -> int:
        """The width of the model's appearance part of a head vector (0: a model of registered spec without one, or a
        model file of no registered spec)."""
        spec = find_spec(self.embedder.describe())
        return spec.appearance_dims if spec is not None else 0

    def bars(self, needs: str, otherwise: str = "") -> Thresholds:
        """The bars a head is judged by: the library's own thresholds.json, else the model's; refused in one line where
        there are none, saying what `needs` them (and what does not: `otherwise`)."""
        if self._bars is None:
            info = self.embedder.describe()
            found = thresholds_for(self.library_root, info)
            if found is None:
                raise HeadsearchError(f"no thresholds for {info.label()}: {needs} by calibrated bars (`headsearch bench accuracy SET "
                                      f"--calibrate 1e-3 --thresholds-out FILE` makes them for a model file){otherwise}")
            self._bars = found
        return self._bars

    # ----- references ----------------------------------------------------------------------------
    def photo_head(self, photo: Path | np.ndarray, label: str, number: int | None = None, whole_image: bool = False,
                   several: str = PICK_ONE, no_head: str | None = None) -> ReferenceHead:
        """One head of a photo (a file, or RGB pixels named `label`) as a reference's head, its picture cut out: head
        `number` (numbered left to right), its largest (`LARGEST`), or its only one (a photo of several refused in one
        line, `several` saying what to do, `{n}` the number of heads); `whole_image`: the photo is the head crop.
        `no_head`: what to do when no head is found in it, said after the photo's name."""
        try:
            return self._photo_head(photo, label, number, whole_image, several)
        except NoHeadFound as e:
            if no_head is None:
                raise
            raise NoHeadFound(f"{label}: no head found in this photo{no_head}") from e

    def _photo_head(self, photo: Path | np.ndarray, label: str, number: int | None, whole_image: bool, several: str) -> ReferenceHead:
        if whole_image or number == LARGEST:
            e = self.photos.heads(photo, label, whole_image=whole_image)[0]
        else:
            heads = self.photos.heads(photo, label, all_heads=True)
            if number is None and len(heads) > 1:
                raise HeadsearchError(f"{label}: {len(heads)} heads in this photo" + several.format(n=len(heads)))
            if number is not None and not 1 <= number <= len(heads):
                raise HeadsearchError(f"{label}: no head {number}: the photo has {len(heads)} head{'s' if len(heads) != 1 else ''} "
                                      f"(1-{len(heads)})")
            e = heads[(number or 1) - 1]
        return ReferenceHead(e.vectors, e.head.face_visible, encode_jpeg(picture_of(e.head.crop), PICTURE_QUALITY), e.head.box.area)

    def photo_heads(self, photos: Sequence[Path | np.ndarray], number: int | None = None, whole_image: bool = False,
                    several: str = PICK_ONE, labels: Sequence[str] | None = None, skip: Callable[[HeadsearchError], None] | None = None,
                    no_head: str | None = None) -> list[ReferenceHead]:
        """The head of each photo, as `photo_head` picks it: files, or folders of them (`photo_files`); or, with `labels`
        (how each is named: an upload as the user named it, a video's frame), files and pixels taken as they are. `skip`:
        a photo that gives no head is told to it and left out (else refused)."""
        if labels is None:
            photos = photo_files([Path(p) for p in photos])  # type: ignore[arg-type]
            labels = [str(p) for p in photos]
        heads = []
        for photo, label in zip(photos, labels, strict=True):
            try:
                heads.append(self.photo_head(photo, label, number, whole_image, several, no_head))
            except HeadsearchError as e:
                if skip is None:
                    raise
                skip(e)
        return heads

    def photo_reference(self, photos: Sequence[Path | np.ndarray], name: str | None = None, number: int | None = None,
                        whole_image: bool = False, several: str = PICK_ONE, labels: Sequence[str] | None = None,
                        sources: Sequence[str] | None = None, skip: Callable[[HeadsearchError], None] | None = None,
                        no_head: str | None = None) -> Reference | None:
        """One person's photos as one reference (their heads, `photo_heads`, averaged), named `name` (default: the first
        photo's name), made of `sources` (default: the photos named); None where `skip` left every photo out."""
        heads = self.photo_heads(photos, number, whole_image, several, labels, skip, no_head)
        if not heads:
            return None
        named = list(labels) if labels is not None else [str(p) for p in photos]
        return Reference.of(name or Path(named[0]).stem or "reference", heads, named if sources is None else list(sources))

    def person_heads(self, key: str | int) -> tuple[str, list[ReferenceHead], str]:
        """A person of the library (a name or an id) as heads: its reference photos, else its main look; with its name
        and what they were made of."""
        if self.library is None:
            raise HeadsearchError(f"--person {key}: a person of a library needs --library")
        return person_heads(self.library, key)

    def person_reference(self, key: str | int) -> Reference:
        """A person of the library as a reference (`person_heads` averaged)."""
        name, heads, said = self.person_heads(key)
        return Reference.of(name, heads, [said])

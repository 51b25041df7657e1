"""The query service: the one road from a photo to the moments a person appears, which the CLI's `query`,
the web app and the benchmarks take.

A photo (a file or an upload's bytes) is read within the media limits, its heads found (`photo_heads`),
embedded by the library's own model, searched inside the scope (never the photo itself), ranked, tiered
and cut at the confidence bar; each hit gets its picture (the matched moment, head boxed).
"""
from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from headsearch.detection.faces import FaceDetector
from headsearch.evaluation.thresholds import Thresholds, thresholds_for
from headsearch.models.base import Embedder
from headsearch.models.registry import load_embedder
from headsearch.search.engine import QueryEngine
from headsearch.search.hits import (
    Confidence,
    HeadResult,
    Scope,
    confidence_for,
    scoped_search_vectors,
    uncalibrated_note,
    without_face,
)
from headsearch.search.photo import photo_heads, photo_pixels
from headsearch.search.pictures import render_hit_pictures
from headsearch.store.library import Library
from schemas.records import SearchHit, VectorKind

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueryOptions:
    """What a query asks for."""

    k: int = 5  # distinct tracks per head
    all_heads: bool = False  # every head of the photo, not only the largest
    whole_image: bool = False  # the photo is already the head crop
    scope: Scope = field(default_factory=Scope)
    min_score: float | None = None  # a bar of the user's instead of the calibrated identity threshold
    show_weak: bool = False  # the hits below the bar too, marked
    ranking: str = "appearance"  # headsearch.search.ranking
    pictures: bool = True  # render each hit's picture


@dataclass
class Answer:
    """A query's answer: one result per head searched, the bar they were held to, and the note to say when
    the scores are uncalibrated."""

    results: list[HeadResult]
    confidence: Confidence
    note: str | None = None

    @property
    def shown(self) -> list:
        return [h for r in self.results for h in r.hits]


class SearchService:
    """Searches one library with the model that made it (loaded on the first search, kept for the next ones).

    `media_guard` wraps the decoding of the hits' pictures (the web app lets one thread decode at a time)."""

    def __init__(self, library: Library, model: str | None = None,
                 media_guard: Callable[[], AbstractContextManager] = contextlib.nullcontext):
        self.library = library
        self._model = model
        self._embedder: Embedder | None = None
        self._detector: FaceDetector | None = None
        self._media_guard = media_guard
        self._lock = threading.Lock()  # one search at a time: the model and the vector indexes are shared

    @property
    def embedder(self) -> Embedder:
        """The library's model (ModelMismatch when --model names another)."""
        if self._embedder is None:
            embedder = load_embedder(self._model or self.library.model.source)
            self.library.check_model(embedder.describe())
            self._embedder = embedder
        return self._embedder

    @property
    def detector(self) -> FaceDetector:
        if self._detector is None:
            self._detector = FaceDetector()
        return self._detector

    def thresholds(self) -> Thresholds | None:
        """The library's own thresholds, else those shipped with its model, with the "same person" bars set for
        the library's size (`Thresholds.for_library`); None: uncalibrated."""
        found = thresholds_for(self.library.root, self.library.model)
        if found is None:
            return None
        with self.library.reading() as reader:
            sized = found.for_library(reader.track_count())
        if sized.budget:
            log.info("thresholds: %s; identity > %.4f%s", sized.budget, sized.identity,
                     "".join(f", {name} > {getattr(sized, name):.4f}" for name in ("head_identity", "appearance") if getattr(sized, name) is not None))
        return sized

    def engine(self, ranking: str = "appearance") -> QueryEngine:
        """The engine over the library's vectors as they are now (an index run may have committed since)."""
        self.library.vector_index(VectorKind.ID)
        self.library.refresh_indexes()
        return QueryEngine(self.library, self.thresholds(), ranking)

    def search_photo(self, photo: Path | bytes, options: QueryOptions = QueryOptions(), name: str | None = None) -> Answer:
        """The moments of the person (or each person, `all_heads`) in a photo: a file, or an upload's bytes named `name`."""
        rgb = photo_pixels(photo, name)
        label = name or str(photo)
        with self._lock:
            heads = photo_heads(rgb, label, self.detector, self.embedder, options.all_heads, options.whole_image)
            vectors = self.embedder.embed([h.crop for h in heads])
            with self.library.session():  # the look-ups below: one open of the database
                engine = self.engine(options.ranking)
                confidence = confidence_for(engine.thresholds, options.min_score, options.show_weak)
                scope = (options.scope.with_query_bytes(self.library, bytes(photo)) if isinstance(photo, bytes | bytearray)
                         else options.scope.with_query_file(self.library, Path(photo)))
                results = []
                for i, head in enumerate(heads):
                    bar = confidence if head.face_visible else without_face(confidence, engine.thresholds)
                    result = scoped_search_vectors(engine, {kind: v[i] for kind, v in vectors.items()}, options.k, scope, bar)
                    result.head, result.confidence = head, (bar if bar is not confidence else None)
                    results.append(result)
        answer = Answer(results, confidence, None if confidence.calibrated else uncalibrated_note(self.library.model.name))
        if options.pictures:
            with self._media_guard():
                render_hit_pictures(self.library.root, answer.shown)
        return answer

    def similar(self, vectors: dict[VectorKind, np.ndarray], k: int, exclude_track: int | None = None) -> list[SearchHit]:
        """The k tracks most like these vectors (a track's own, for "more like this"), without `exclude_track`."""
        with self._lock, self.library.session():
            hits = self.engine().search_vectors(vectors, k + 1)
        return [h for h in hits if h.track_id != exclude_track][:k]

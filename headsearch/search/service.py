"""The query service: the one road from a photo to the moments a person appears, which the CLI's `query`,
the web app and the benchmarks take.

A photo (a file or an upload's bytes) becomes the library's vectors (`headsearch.embedding`: its heads found,
cut and embedded by the library's own model), searched inside the scope (never the photo itself), ranked, tiered
and cut at the confidence bar; each hit gets its picture (the matched moment, head boxed). A person of the
library (`search_person`) is searched by the tracks people put together and its reference photos; vectors
(`similar`: a track's own, for "more like this") by the engine directly. Searches run at once up to the usable cores.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from headsearch.basics.errors import HeadsearchError
from headsearch.basics.runtime import usable_cpus
from headsearch.basics.stages import StageClock
from headsearch.embedding.photo_heads import EmbeddedHead, PhotoEmbedder
from headsearch.evaluation.thresholds import Thresholds, thresholds_for
from headsearch.models.base import Embedder
from headsearch.search.engine import QueryEngine
from headsearch.search.hits import (
    Confidence,
    HeadResult,
    Scope,
    confidence_for,
    found_hits,
    older_model_note,
    scoped_search_vectors,
    together,
    uncalibrated_note,
    without_face,
)
from headsearch.search.pictures import render_hit_pictures
from headsearch.store.library import Library
from schemas.records import SearchHit, VectorKind

if TYPE_CHECKING:  # a photo query needs none of the people code
    from headsearch.people.listing import Person

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
    person: Person | None = None  # the person searched (`search_person`)

    @property
    def shown(self) -> list:
        return [h for r in self.results for h in r.hits]


class SearchService:
    """Searches one library with the model that made it (loaded on the first search, kept for the next ones).

    `photos`: the model to embed photos with (default: the library's own; another is refused when used);
    `start_search` gives one already loading for a cold query. `media_guard` wraps the decoding of the hits' pictures
    (the web app lets one thread decode at a time); `clock` counts the seconds of each stage (`query -v` shows them)."""

    def __init__(self, library: Library, photos: PhotoEmbedder | None = None,
                 media_guard: Callable[[], AbstractContextManager] = contextlib.nullcontext, clock: StageClock | None = None):
        self.library = library
        self.photos = photos or PhotoEmbedder(library_root=library.root)
        self._media_guard = media_guard
        self.clock = clock or StageClock()
        # Searches run at once up to the usable cores (a photo's detection and embedding, the database's reads and the
        # pictures' decoding release the GIL), so that memory stays flat; the vector indexes, which a refresh replaces
        # or extends, are searched and brought up to date by one at a time (`_indexes`: a few milliseconds a search).
        self._slots = threading.BoundedSemaphore(usable_cpus())
        self._indexes = threading.RLock()

    @property
    def embedder(self) -> Embedder:
        """The library's model (ModelMismatch when --model names another)."""
        return self.photos.embedder

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

    def search_photo(self, photo: Path | bytes, options: QueryOptions = QueryOptions(), name: str | None = None,
                     heads: Future[list[EmbeddedHead]] | None = None) -> Answer:
        """The moments of the person (or each person, `all_heads`) in a photo: a file, or an upload's bytes named `name`;
        `heads`: the photo's heads being found already (`start_search`), with the options' `all_heads` and `whole_image`."""
        with self._slots, contextlib.ExitStack() as stack:
            # The database and the index first: a cold query's models are still loading in their thread meanwhile.
            with self.clock.stage("database"):
                stack.enter_context(self.library.session())  # the look-ups below: one open of the database
            with self.clock.stage("index"), self._indexes:
                engine = self.engine(options.ranking)
            with self.clock.stage("models"):
                self.photos.load()
            with self.clock.stage("photo"):
                found = heads.result() if heads is not None else self.photos.heads(photo, name, options.all_heads, options.whole_image)
            with self.clock.stage("search"):
                confidence = confidence_for(engine.thresholds, options.min_score, options.show_weak)
                scope = (options.scope.with_query_bytes(self.library, bytes(photo)) if isinstance(photo, bytes | bytearray)
                         else options.scope.with_query_file(self.library, Path(photo)))
                with self._indexes:
                    results = [self._search_head(engine, embedded, options.k, scope, confidence) for embedded in found]
        notes = [None if confidence.calibrated else uncalibrated_note(self.library.model.name), older_model_note(self.library)]
        answer = Answer(results, confidence, "\n".join(n for n in notes if n) or None)
        return self._with_pictures(answer, options.pictures)

    @staticmethod
    def _search_head(engine: QueryEngine, embedded: EmbeddedHead, k: int, scope: Scope, confidence: Confidence) -> HeadResult:
        head = embedded.head
        bar = confidence if head.face_visible else without_face(confidence, engine.thresholds)
        result = scoped_search_vectors(engine, embedded.vectors, k, scope, bar)
        result.head, result.confidence = head, (bar if bar is not confidence else None)
        return result

    def search_together(self, photo: Path, other: Path, options: QueryOptions = QueryOptions(), without: bool = False,
                        heads: Future[list[EmbeddedHead]] | None = None) -> Answer:
        """The moments of the person in `photo` while the person in `other` is on screen in the same shot at the same
        time (or, `without`, while they are not): both searched with the options (confident hits only, unless the
        options say otherwise), then each of the first's time ranges cut to the second's."""
        wide = replace(options, k=max(10 * options.k, 200), pictures=False)
        first, second = self.search_photo(photo, wide, heads=heads), self.search_photo(other, wide)
        if len(second.results) != 1:
            raise HeadsearchError(f"{other}: --with and --without take one person (without --all)")
        results = []
        for r in first.results:
            kept = together(r, second.results[0], without)
            kept.hits = kept.hits[: options.k]
            results.append(kept)
        return self._with_pictures(Answer(results, first.confidence, first.note), options.pictures)

    def search_person(self, person: str | int, scope: Scope | None = None, pictures: bool = True) -> Answer:
        """Every moment of a person of the library (a name or an id; `PersonNotFound` otherwise), best first: the tracks
        people put together, each scored against the person's other tracks and reference photos, and tiered (same look,
        other look, below the identity threshold). All are shown: the person's tracks are what people decided.
        `note` says how many reference photos were left aside because another model made them."""
        from headsearch.people.listing import find_person, person_looks, person_moments
        from headsearch.people.photos import reference_vectors, stacked

        with self._slots, self._indexes, self.library.session():
            found = find_person(self.library, person)
            found.looks = person_looks(self.library, found.id)
            references, aside = reference_vectors(self.library, found.id)
            results = [found_hits(self.library, person_moments(self.library, found, stacked(references)), scope or Scope(), found.looks)]
        note = (f"note: {aside} reference photo{'s were' if aside != 1 else ' was'} of {found.label()} made by another model and "
                f"left aside (`headsearch people add-photo {found.id} PHOTO` again)") if aside else None
        return self._with_pictures(Answer(results, Confidence(), note, found), pictures)

    def on_screen(self, video: Path) -> tuple[list[Answer], list[tuple[float, float]]]:
        """Who is on screen in one indexed video: each listed person seen in it with its moments there (best first,
        tiered), and the video's shots (start, end); `HeadsearchError` when the video is not in the library."""
        path = str(Path(video).expanduser().resolve())
        with self.library.browsing() as b:
            row = next((v for v in b.videos() if v.path == path), None)
            shots = [(s.start_time, s.end_time) for s in b.shots(row.id)] if row is not None else []
        if row is None:
            raise HeadsearchError(f"{video}: not in the library {self.library.root} (`headsearch list` shows what it holds)")
        from headsearch.people.listing import list_people

        people = [p for p in list_people(self.library, with_looks=False) if path in p.videos]
        scope = Scope(under=(Path(path),))
        return [self.search_person(p.id, scope, pictures=False) for p in people], shots

    def people_moments(self, persons: Sequence[str], video: Path | None = None) -> tuple[list[Answer], dict[str, list[tuple[float, float]]]]:
        """The moments of persons (names or ids), or with `video` their moments in it (every listed person seen there
        when none is named), with the video's shots (its path -> (start, end) ranges; none without a video)."""
        if video is None:
            return [self.search_person(p, Scope(), pictures=False) for p in persons], {}
        answers, shots = self.on_screen(video)
        if persons:
            keep = {str(p).casefold() for p in persons}
            answers = [a for a in answers if a.person.label().casefold() in keep or str(a.person.id) in keep]
        return answers, {str(Path(video).expanduser().resolve()): shots}

    def _with_pictures(self, answer: Answer, pictures: bool) -> Answer:
        if pictures:
            with self.clock.stage("pictures"), self._media_guard():
                render_hit_pictures(self.library.root, answer.shown)
        return answer

    def similar(self, vectors: dict[VectorKind, np.ndarray], k: int, exclude_track: int | None = None) -> list[SearchHit]:
        """The k tracks most like these vectors (a track's own, for "more like this"), without `exclude_track`."""
        with self._slots, self._indexes, self.library.session():
            hits = self.engine().search_vectors(vectors, k + 1)
        return [h for h in hits if h.track_id != exclude_track][:k]

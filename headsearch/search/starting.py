"""A search's start, for the cold command line: the model starts loading, and finds the query photo's heads, in a
thread while the library's code (SQLAlchemy, DuckDB) loads and the library opens; the search service is then built
with that model. Importing this module costs none of the library's code."""
from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

from headsearch.basics.stages import StageClock
from headsearch.embedding.photo_heads import EmbeddedHead, PhotoEmbedder

if TYPE_CHECKING:  # loaded below, while the model loads
    from headsearch.search.service import SearchService


def start_search(root: Path, model: str | None = None, clock: StageClock | None = None, photo: Path | None = None,
                 all_heads: bool = False, whole_image: bool = False) -> tuple[SearchService, Future[list[EmbeddedHead]] | None]:
    """The search service of the library at `root` (with `model`, default: the library's own), and the future heads of
    `photo` (None without one) to give its search (`SearchService.search_photo(..., heads=)`). The clock counts the
    stages "imports" and "library"."""
    clock = clock or StageClock()
    photos = PhotoEmbedder(model, root)
    # Without a manifest there is no library (opening it says why), and a person needs no model: none loads for nothing.
    found = photos.start_loading(photo, all_heads, whole_image) if photos.made_by is not None and photo is not None else None
    with clock.stage("imports"):
        from headsearch.search.service import SearchService
        from headsearch.store.library import Library
    with clock.stage("library"):
        library = Library.open(root)
    return SearchService(library, photos, clock=clock), found

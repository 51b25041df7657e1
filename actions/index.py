"""`headsearch index`: videos and photos (files or folders) indexed into a library, through the indexer's one writer
(`indexer.pipeline.Indexer`). The library is made where there is none, with the model asked for (an existing library
keeps its own); a run that made a library and indexed nothing leaves nothing behind."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from headsearch.basics.errors import HeadsearchError
from headsearch.basics.settings import IndexSettings
from headsearch.models import load_embedder
from headsearch.store.layout import MANIFEST, existing_model
from headsearch.store.library import Library
from indexer.pipeline import Indexer, IndexSummary, discover


def index_files(paths: Sequence[Path], root: Path, model: str | None, settings: IndexSettings, progress: bool = False,
                retry_failed: bool = False, workers: int = 1, engine: str = "local", address: str | None = None,
                report: Callable[[str], None] = print) -> IndexSummary:
    """Index `paths` into the library at `root` (made where there is none); refused in one line when a new library would
    have nothing to index."""
    new_library = not (Path(root) / MANIFEST).exists()
    files, problems, _ = discover(paths)
    if not files and new_library:  # nothing to index: create nothing; one line, whatever went wrong
        if problems:
            raise HeadsearchError("; ".join(problems) + ": nothing to index")
        raise HeadsearchError(f"nothing to index (no videos or photos in {', '.join(map(str, paths))})")
    existing = existing_model(root) if model is None else None  # an existing library keeps its model
    embedder = load_embedder(model or (existing.source if existing else None))
    lib = Library.create(root, embedder.describe())
    summary = None
    try:
        summary = Indexer(lib, embedder, settings, progress=progress, retry_failed=retry_failed, workers=workers, engine=engine,
                          address=address).run(paths, report=report)
    finally:
        if new_library and (summary is None or not summary.indexed):
            lib.discard_if_empty(remove_folder=lib.made_folder)  # nothing was indexed: leave nothing behind
    return summary

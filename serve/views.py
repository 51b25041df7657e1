"""What each page shows, as plain data: the HTML page renders it and its /api twin returns it as JSON. `Site` is one
library as the web app serves it, made of one part per area: searching and exports (`serve.search_views`), videos
(`serve.video_views`), people (`serve.people_views`), compare (`serve.compare_views`), redactions
(`serve.redaction_views`), files and jobs by id (`serve.media_views`).

The library is opened read-only and every read is one short connection (an index run may commit
between two requests and is never kept waiting); the vector indexes are brought up to date with the
database before each search. Long work (a redaction, a comparison, a cast) runs as a job (`serve.jobs`).
"""
from __future__ import annotations

import threading
from pathlib import Path

from headsearch.embedding.photo_heads import PhotoEmbedder
from headsearch.exports.timelines import Moment
from headsearch.search.service import SearchService
from headsearch.store.library import Library
from serve.compare_views import Comparing
from serve.files import IndexedFiles, NotFound
from serve.jobs import Jobs
from serve.media import MediaCache, Playback, cache_folder, decoding
from serve.media_views import MediaFiles
from serve.people_views import NotConfirmed, People
from serve.redaction_views import Redactions
from serve.search_views import Searching
from serve.video_views import FILES_PAGE, Videos
from serve.view_data import MAX_K, watch_url

__all__ = ["FILES_PAGE", "MAX_K", "NotConfirmed", "NotFound", "Site", "watch_url"]


class Site(Searching, Videos, People, Comparing, Redactions, MediaFiles):
    """One library as the web app serves it: the library, its search service (the model loads on the first search), the
    media cache, the jobs."""

    def __init__(self, root: Path, cache_dir: Path | None = None, model: str | None = None):
        self.library = Library.open(Path(root))
        self.root = self.library.root
        self.cache = MediaCache(cache_dir or cache_folder(self.root, self.library.manifest.get("created_at", "")))
        self.service = SearchService(self.library, PhotoEmbedder(model, self.root), media_guard=decoding)
        self.files = IndexedFiles()
        self._playback: dict[tuple[int, str], Playback] = {}
        self._kept: dict[str, list[Moment]] = {}  # search moments kept for their export links
        self._kept_lock = threading.Lock()
        self._photos: dict[str, tuple[bytes, str]] = {}  # the last searches' photos by id: (bytes, name)
        self.jobs = Jobs(self.cache.folder)  # redactions, comparisons and casts, their files in the cache folder
        self.redactions = self.jobs  # the name the redaction pages first had for them
        self._redactor = None  # actions.redact.Redactor, made on the first redaction
        self._redactor_lock = threading.Lock()
        with self.library.browsing() as b:  # the database driver loads now, not on the first page someone asks for
            b.videos()

"""The Search page and the exports, as plain data (`serve.views.Site` takes these methods): a photo searched, the last
photos and searches kept for the page's options and export links, the cards of hits shared by every page."""
from __future__ import annotations

import base64
import os
import re
import secrets
import threading
from pathlib import Path, PurePosixPath

from headsearch.exports.timelines import EXPORT_FORMATS, ExportOptions, Moment, export_bytes
from headsearch.search.hits import ShownHit, export_moments, hidden_line, hit_json, no_match_line, results_json
from headsearch.search.service import Answer, QueryOptions, SearchService
from headsearch.store.layout import THUMBNAILS
from headsearch.store.library import Library
from serve.files import FileNotServed, NotFound, open_in_folder
from serve.view_data import crop_url, watch_url

KEPT_EXPORTS = 64  # searches whose moments are kept for their export links
KEPT_PHOTO_BYTES = 64 << 20  # the last searches' photos kept (in memory, at most this much) so their options re-run them
THUMB_INLINE_BYTES = 32 * 1024  # a thumbnail this small goes inside its card


class Searching:
    """Searching a photo, its export links, and the cards of hits (a part of `serve.views.Site`)."""

    # Site's: the library and its folder, the search service, the kept searches and photos (under one lock)
    library: Library
    root: Path
    service: SearchService
    _kept: dict[str, list[Moment]]
    _photos: dict[str, tuple[bytes, str]]
    _kept_lock: threading.Lock

    def search(self, photo: Path | bytes, name: str, k: int, all_heads: bool, whole_image: bool, show_weak: bool = False) -> Answer:
        """The answer `headsearch query` gives for an uploaded photo (a temporary file, or a kept photo's bytes; named `name`
        in messages): confident hits only unless `show_weak`, never the photo itself. Searches run at once up to the
        usable cores (the service)."""
        options = QueryOptions(k=k, all_heads=all_heads, whole_image=whole_image, show_weak=show_weak)
        return self.service.search_photo(photo if isinstance(photo, bytes) else photo.read_bytes(), options, name)

    def keep_photo(self, photo: Path, name: str) -> str:
        """Keep a searched photo so that the page's options (k, weak matches, every head) search it again without
        picking it again; its id. The last ones are kept, KEPT_PHOTO_BYTES together at most."""
        key = secrets.token_urlsafe(12)
        data = photo.read_bytes()
        with self._kept_lock:
            self._photos[key] = (data, name)
            while sum(len(d) for d, _ in self._photos.values()) > KEPT_PHOTO_BYTES and len(self._photos) > 1:
                self._photos.pop(next(iter(self._photos)))
        return key

    def kept_photo(self, key: str) -> tuple[bytes, str]:
        """A kept photo's bytes and name; NotFound once it is no longer kept."""
        with self._kept_lock:
            found = self._photos.get(key)
        if found is None:
            raise NotFound("the last photo is no longer kept: pick it again")
        return found

    def query_page(self, answer: Answer, all_heads: bool, name: str = "photo") -> dict:
        hint = 'tick "weak matches too" to see them'
        names = [f"{Path(name).stem} head {r.head.number}" if all_heads and r.head is not None else Path(name).stem for r in answer.results]
        heads = []
        for r, label in zip(answer.results, names, strict=True):
            moments, _ = export_moments([r], [label])
            heads.append({"crop": crop_url(r), "cards": self.cards(r.hits), "exports": self.export_links(f"/exports/{self.keep(moments)}", moments),
                          "note": no_match_line(r, answer.confidence, hint) if not r.hits else hidden_line(r, answer.confidence, hint)})
        return {"heads": heads, "hits": results_json(answer.results, all_heads), "uncalibrated": answer.note}

    # ----- exports ----------------------------------------------------------------------------------
    def keep(self, moments: list[Moment]) -> str:
        """Keep a search's moments for its export links (the last `KEPT_EXPORTS` searches); their key."""
        key = secrets.token_urlsafe(12)
        with self._kept_lock:
            self._kept[key] = moments
            while len(self._kept) > KEPT_EXPORTS:
                self._kept.pop(next(iter(self._kept)))
        return key

    def kept(self, key: str) -> list[Moment]:
        with self._kept_lock:
            moments = self._kept.get(key)
        if moments is None:
            raise NotFound("this search's export is gone (search again)")
        return moments

    @staticmethod
    def export_links(base: str, moments: list[Moment]) -> list[dict]:
        """Links to each format an editor takes (the ones installed), when there are moments in videos."""
        if not moments:
            return []
        one_video = len({m.video for m in moments}) == 1
        return [{"format": f.label, "href": f"{base}.{suffix.lstrip('.')}"} for suffix, f in EXPORT_FORMATS.items()
                if (one_video or not f.one_video) and not f.missing()]

    def export_file(self, moments: list[Moment], suffix: str, name: str, shots: dict | None = None, chapters: bool = False) -> tuple[bytes, str]:
        """An export's bytes and its file name."""
        if suffix not in EXPORT_FORMATS:
            raise NotFound(f"no export format {suffix}")
        data, _ = export_bytes(suffix, moments, ExportOptions(name=name), shots, chapters)
        return data, re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:60] + suffix

    # ----- cards --------------------------------------------------------------------------------------
    def cards(self, shown: list[ShownHit]) -> list[dict]:
        """Hits with what a card needs: the matched sighting to show boxed, the file's id, the player's address."""
        out = []
        with self.library.browsing() as b:
            for s in shown:
                h = s.hit
                track = b.track(h.track_id)
                if track is None:  # removed since the search
                    continue
                out.append({**hit_json(s), "video_id": track.video_id, "name": Path(h.video).name, "sighting": h.observation_id,
                            "kind": track.video_kind, "watch": watch_url(track.video_id, h.start, h.end, h.track_id),
                            "thumb": self._thumb_data(track.thumbnail)})
        return out

    def _thumb_data(self, thumbnail: str) -> str | None:
        """A track's thumbnail (a small JPEG in the library folder) as a data URL: a card shows it at first paint, before
        the boxed frame arrives."""
        if PurePosixPath(thumbnail).parts[:1] != (THUMBNAILS,):
            return None
        try:
            opened = open_in_folder(self.root, thumbnail, "a thumbnail")
        except (FileNotServed, NotFound, OSError):
            return None
        try:
            data = os.read(opened.fd, THUMB_INLINE_BYTES + 1)
        finally:
            opened.close()
        return None if len(data) > THUMB_INLINE_BYTES else "data:image/jpeg;base64," + base64.b64encode(data).decode()

"""The files the web app sends, by id (`serve.views.Site` takes these methods): a video or photo (only the version the
library indexed), whether browsers play it, a track's thumbnail, a reference photo's crop, a sighting's boxed frame; and
a job by its id (`serve.jobs`)."""
from __future__ import annotations

from pathlib import Path, PurePosixPath

from headsearch.people.photos import reference_photo
from headsearch.search.pictures import pictures_folder, render_picture
from headsearch.store.layout import PERSON_PHOTOS, PICTURES, THUMBNAILS
from headsearch.store.library import Library
from headsearch.store.rows import VideoRow
from serve.files import FileChanged, FileNotServed, IndexedFiles, NotFound, OpenFile, open_in_folder
from serve.jobs import Job, Jobs
from serve.media import MediaCache, Playback, decoding, probe_playback


class MediaFiles:
    """Files by id, and jobs by id (a part of `serve.views.Site`)."""

    # Site's: the library and its folder, the media cache, the indexed files, what browsers play, the jobs
    library: Library
    root: Path
    cache: MediaCache
    files: IndexedFiles
    jobs: Jobs
    _playback: dict[tuple[int, str], Playback]

    def playback(self, video: VideoRow) -> Playback:
        """Whether browsers play the file as it is (probed once, only as the version indexed)."""
        key = (video.id, video.fingerprint)
        if key not in self._playback:
            try:
                opened = self.open_indexed(video)
            except (FileNotServed, FileChanged) as e:
                return Playback(False, str(e))
            try:
                self._playback[key] = probe_playback(Path(video.path), opened)
            finally:
                opened.close()
        return self._playback[key]

    def open_indexed(self, video: VideoRow) -> OpenFile:
        """The indexed file, opened for sending only when it is the version indexed (`serve.files`)."""
        return self.files.open(video.path, video.size, video.fingerprint, f"{'photo' if video.kind == 'image' else 'video'} {video.id}")

    def video_row(self, video_id: int) -> VideoRow:
        with self.library.browsing() as b:
            video = b.video(video_id)
        if video is None:
            raise NotFound(f"no video {video_id}")
        return video

    def thumbnail(self, track_id: int) -> OpenFile:
        """A track's thumbnail: a regular file in the library's thumbnails folder, never through a link."""
        with self.library.browsing() as b:
            track = b.track(track_id)
        if track is None:
            raise NotFound(f"no track {track_id}")
        if PurePosixPath(track.thumbnail).parts[:1] != (THUMBNAILS,):
            raise FileNotServed(f"track {track_id}: its thumbnail {track.thumbnail} is not in the library's {THUMBNAILS} folder")
        return open_in_folder(self.root, track.thumbnail, f"track {track_id}'s thumbnail")

    def person_photo(self, photo_id: int) -> OpenFile:
        """A reference photo's head crop: a regular file in the library's person-photos folder, never through a link."""
        row = reference_photo(self.library, photo_id)
        if row is None:
            raise NotFound(f"no reference photo {photo_id}")
        if PurePosixPath(row.crop).parts[:1] != (PERSON_PHOTOS,):
            raise FileNotServed(f"reference photo {photo_id}: its crop {row.crop} is not in the library's {PERSON_PHOTOS} folder")
        return open_in_folder(self.root, row.crop, f"reference photo {photo_id}")

    def frame(self, sighting_id: int) -> OpenFile:
        """The picture of a sighting: its frame with the head boxed (the same picture `query` makes), rendered only
        from the version of the file indexed and kept in the library's pictures folder (else in the app's cache)."""
        with self.library.reading() as r:
            sighting = r.sightings([sighting_id]).get(sighting_id)
        if sighting is None:
            raise NotFound(f"no sighting {sighting_id}")
        self.files.open(sighting.path, sighting.size, sighting.fingerprint, f"sighting {sighting_id}'s file").close()
        base = self.root
        if pictures_folder(self.root) != self.root / PICTURES:  # the library folder cannot be written: the app's own cache
            base = self.cache.folder
            (base / PICTURES).mkdir(parents=True, exist_ok=True)
        with decoding():
            picture, why = render_picture(base / PICTURES, Path(sighting.path), sighting.time, sighting)
        if picture is None:
            raise NotFound(f"no picture of sighting {sighting_id}: {why}")
        if picture.parent != base / PICTURES:
            raise FileNotServed(f"no picture of sighting {sighting_id}: it could not be kept in {base / PICTURES}")
        return open_in_folder(base, f"{PICTURES}/{picture.name}", f"sighting {sighting_id}'s picture")

    def job(self, key: str) -> Job:
        """A job by its id (a redaction, a comparison, a cast)."""
        found = self.jobs.get(key)
        if found is None:
            raise NotFound("no such redaction or comparison (jobs are forgotten an hour after they end, and when the app stops)")
        return found

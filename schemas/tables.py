"""The library's DuckDB tables, declared with SQLAlchemy (duckdb-engine cannot reflect them)."""
from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Double,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    TypeDecorator,
)

from schemas.file_names import disk_path, stored_path

metadata = MetaData()

class FilePath(TypeDecorator):
    """A column of file names: any name the filesystem allows, stored as `stored_path` says and read back exactly."""

    impl = String
    cache_ok = True

    def process_bind_param(self, value, dialect):
        return None if value is None else stored_path(value)

    def process_result_value(self, value, dialect):
        return None if value is None else disk_path(value)


# One row per indexed file (a video, or a still image indexed as a one-frame item).
videos = Table(
    "videos",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=False),
    Column("path", FilePath, nullable=False, unique=True),
    Column("kind", String, nullable=False),  # "video" or "image"
    Column("fingerprint", String, nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("mtime", Double, nullable=False),
    Column("duration", Double, nullable=False),
    Column("fps", Double, nullable=False),
    Column("width", Integer, nullable=False),
    Column("height", Integer, nullable=False),
    Column("frames_decoded", BigInteger, nullable=False),
    Column("frames_sampled", BigInteger, nullable=False),
    Column("decoder", String, nullable=False),
    Column("indexed_at", Double, nullable=False),
    # The file's own frame size (boxes are stored in decoded pixels, `width` x `height`); format 3.
    Column("source_width", Integer, nullable=True),
    Column("source_height", Integer, nullable=True),
    # The frames the analysis sampled (format 11): their indexes in decoding order, little-endian int32, rising. Exact
    # where no rate is: sampling restarts at every cut and follows presentation times (a variable rate too). NULL in
    # rows indexed before format 11 (a redaction then guesses the sampling from the gaps between sightings).
    Column("samples", LargeBinary, nullable=True),
)

shots = Table(
    "shots",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=False),
    Column("video_id", BigInteger, nullable=False, index=True),
    Column("shot_index", Integer, nullable=False),
    Column("start_frame", BigInteger, nullable=False),
    Column("end_frame", BigInteger, nullable=False),
    Column("start_time", Double, nullable=False),
    Column("end_time", Double, nullable=False),
)

tracks = Table(
    "tracks",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=False),
    Column("video_id", BigInteger, nullable=False, index=True),
    Column("shot_id", BigInteger, nullable=False),
    Column("start_time", Double, nullable=False),
    Column("end_time", Double, nullable=False),
    Column("best_time", Double, nullable=False),
    Column("n_observations", Integer, nullable=False),
    Column("face_visible_share", Double, nullable=False),
    Column("thumbnail", String, nullable=False),  # path relative to the library folder
    # Format 10: a track joined within its shot to an earlier track's person (`indexer.rejoin`): the first track of that
    # person in the shot, what joined it ("head" or "head+body") and the join's score; NULL for every other track.
    Column("joined_to", BigInteger, nullable=True),
    Column("join_cue", String, nullable=True),
    Column("join_score", Double, nullable=True),
)

observations = Table(
    "observations",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=False),
    Column("track_id", BigInteger, nullable=False, index=True),
    Column("video_id", BigInteger, nullable=False, index=True),
    Column("frame_index", BigInteger, nullable=False),
    Column("time", Double, nullable=False),
    Column("x1", Double, nullable=False),
    Column("y1", Double, nullable=False),
    Column("x2", Double, nullable=False),
    Column("y2", Double, nullable=False),
    Column("face_visible", Boolean, nullable=False),
    Column("face_score", Double, nullable=True),
    # How the head was found (format 5): "face", "keypoints" (person keypoints, no face) or "followed"
    # (template matching from an earlier sighting); libraries upgraded from format 4 get face / followed.
    Column("found_by", String, nullable=True),
    # Degrees the face is turned, signed (format 7; `headsearch.detection.pose`): NULL without a face, and in sightings
    # indexed before format 7.
    Column("yaw", Double, nullable=True),
)

# One row per stored vector; `id` is the vector's id inside the FAISS index of its `kind`.
vectors = Table(
    "vectors",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=False),
    Column("kind", String, nullable=False),  # "id" (identity) or "head" (whole-head appearance)
    Column("observation_id", BigInteger, nullable=False),
    Column("track_id", BigInteger, nullable=False, index=True),
    Column("video_id", BigInteger, nullable=False, index=True),
    Column("embedding", LargeBinary, nullable=False),  # float32, little-endian, L2-normalised
)

# Files that could not be indexed, remembered with their version so that the next run skips
# them (and says how many) until they change or `index --retry-failed` is given; format 3.
failed_files = Table(
    "failed_files",
    metadata,
    Column("path", FilePath, primary_key=True),
    Column("fingerprint", String, nullable=False),  # "" when the file could not even be read
    Column("size", BigInteger, nullable=False),
    Column("mtime", Double, nullable=False),
    Column("error", String, nullable=False),  # the one line the user was shown
    Column("failed_at", Double, nullable=False),
)

# Key/value facts about the library; `generation` increases with every committed change, and
# the saved FAISS files record the generation they reflect.
library_state = Table(
    "library_state",
    metadata,
    Column("key", String, primary_key=True),
    Column("value", String, nullable=False),
)

# People (format 3): tracks grouped into persons by `headsearch.people.persons`. A person keeps the mean of
# its tracks' identity vectors, so a name survives when every one of its files is re-indexed.
people = Table(
    "people",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=False),
    Column("name", String, nullable=True),
    Column("hidden", Boolean, nullable=False),
    Column("centroid", LargeBinary, nullable=False),  # float32 mean of its tracks' unit identity vectors (not renormalised)
    Column("weight", Double, nullable=False),  # how many tracks that mean was taken over
    Column("created_at", Double, nullable=False),
)

# Which person each track belongs to (every clustered track has exactly one row), and where the
# track was (file, time and head box of its best sighting): a re-indexed file's new tracks take
# the place of the old ones they match.
person_tracks = Table(
    "person_tracks",
    metadata,
    Column("track_id", BigInteger, primary_key=True, autoincrement=False),
    Column("person_id", BigInteger, nullable=False, index=True),
    Column("video_path", FilePath, nullable=False),
    Column("time", Double, nullable=False),
    Column("x1", Double, nullable=False),
    Column("y1", Double, nullable=False),
    Column("x2", Double, nullable=False),
    Column("y2", Double, nullable=False),
)

# What a user said about a track: it is ("is") or is not ("not") a person. The track is also
# remembered by where it was (file, time, head box), so the verdict finds the track again after
# its file is re-indexed under new ids.
person_feedback = Table(
    "person_feedback",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=False),
    Column("person_id", BigInteger, nullable=False),
    Column("verdict", String, nullable=False),  # "is" or "not"
    Column("track_id", BigInteger, nullable=False),
    Column("video_path", FilePath, nullable=False),
    Column("time", Double, nullable=False),
    Column("x1", Double, nullable=False),
    Column("y1", Double, nullable=False),
    Column("x2", Double, nullable=False),
    Column("y2", Double, nullable=False),
    Column("created_at", Double, nullable=False),
)

# How good each track is for grouping into persons (format 6), measured once by `headsearch.people.quality` from its
# sightings and thumbnail; the gates (`QualityGates`) are applied when read, so changing them needs no new measurement.
track_quality = Table(
    "track_quality",
    metadata,
    Column("track_id", BigInteger, primary_key=True, autoincrement=False),
    Column("face_px", Double, nullable=False),  # height of its largest face, in decoded pixels (0: no face)
    Column("sharpness", Double, nullable=False),  # variance of the Laplacian of the thumbnail's middle
    Column("face_score", Double, nullable=False),  # the face detector's best score (0: no face)
    Column("faces", Integer, nullable=False),  # sightings with a face
    Column("photo", Boolean, nullable=False),  # the track is a photo's (one sighting by nature)
)

# A user's answer to "are these the same person?" when it is no (format 6): the two persons are kept apart and not
# asked about again. A yes merges them (verdicts on their tracks, `person_feedback`).
person_pairs = Table(
    "person_pairs",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=False),
    Column("person_a", BigInteger, nullable=False),
    Column("person_b", BigInteger, nullable=False),
    Column("verdict", String, nullable=False),  # "different"
    Column("created_at", Double, nullable=False),
)

# Reference photos of a person (format 6): the head a user gave for them, embedded with the library's model, its crop
# kept in the library folder (`person-photos/<id>.jpg`); `query --person` searches with them.
person_photos = Table(
    "person_photos",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=False),
    Column("person_id", BigInteger, nullable=False, index=True),
    Column("path", FilePath, nullable=False),  # the photo as the user named it
    Column("fingerprint", String, nullable=False),
    Column("crop", String, nullable=False),  # the head crop, relative to the library folder
    Column("model", String, nullable=False),  # name and version of the model that made the vectors
    Column("face_visible", Boolean, nullable=False),
    Column("id_vector", LargeBinary, nullable=True),  # float32, unit (None without a face)
    Column("head_vector", LargeBinary, nullable=True),  # float32, unit (None for models without head vectors)
    Column("added_at", Double, nullable=False),
)

# Persons forgotten (format 8; `headsearch people forget`): one row each, saying when and how much was removed, kept as
# the library's record of the erasure. Never a vector, a picture or where the person was seen.
forgotten_people = Table(
    "forgotten_people",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=False),
    Column("person_id", BigInteger, nullable=False),
    # The name the person had: kept only when the user asked (`people forget --keep-name`); NULL otherwise.
    Column("name", String, nullable=True),
    Column("forgotten_at", Double, nullable=False),
    Column("tracks", BigInteger, nullable=False),
    Column("sightings", BigInteger, nullable=False),
    Column("vectors", BigInteger, nullable=False),
    Column("thumbnails", BigInteger, nullable=False),  # files deleted
    Column("pictures", BigInteger, nullable=False),  # cached pictures of the frames they were in, deleted
    Column("reference_photos", BigInteger, nullable=False),
    Column("corrections", BigInteger, nullable=False),  # verdicts on tracks and answers about pairs that named them
)


# The videos whose analysis lost tracks to a forgetting (format 9; `headsearch.store.forgetting`): a redaction that hides
# every head analyses such a video again instead of reading the library's analysis (it no longer holds the forgotten
# person's heads), and a file of the same content indexed again says that it held a forgotten person.
forgotten_videos = Table(
    "forgotten_videos",
    metadata,
    Column("forgotten_id", BigInteger, nullable=False),  # the forgetting (`forgotten_people.id`)
    Column("video_id", BigInteger, nullable=False),  # the video's row as it was then (ids are never reused)
    Column("fingerprint", String, nullable=False),  # its content fingerprint: a copy or a re-index of it is recognised
)

# What `headsearch people forget` found when it searched every file of the library folder and the app's cache for the
# person after the rewrite (format 9): one row a search, kept as the record that nothing was left (or what was).
forget_checks = Table(
    "forget_checks",
    metadata,
    Column("forgotten_id", BigInteger, nullable=False),
    Column("checked_at", Double, nullable=False),
    Column("files", BigInteger, nullable=False),  # files read
    Column("bytes", BigInteger, nullable=False),  # bytes read
    Column("needles", BigInteger, nullable=False),  # vectors (float32 and float16), picture digests and names looked for
    Column("found", String, nullable=False),  # "" when nothing was found, else the files that held something, one a line
)

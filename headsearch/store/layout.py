"""What a library folder holds, by name (its vector indexes' files: `headsearch.vectors.index_cache`)."""
from __future__ import annotations

import json
from pathlib import Path

from headsearch.basics.errors import ModelMismatch
from schemas.records import ModelInfo

FORMAT_VERSION = 11  # the library format this release makes and reads (older ones are upgraded: `headsearch.store.migrations`)
MANIFEST = "manifest.json"  # the format and the model; written last, so a folder with one is a complete library
DATABASE = "library.duckdb"  # the source of truth, vectors included
THUMBNAILS = "thumbnails"  # one JPEG per track, `thumbnails/<track id>.jpg`
PICTURES = "pictures"  # hits' pictures, `pictures/<sighting id>.jpg`, made on demand
PERSON_PHOTOS = "person-photos"  # reference photos of persons (their head crops), `person-photos/<photo id>.jpg`
WRITER_LOCK = ".writer.lock"
UNFINISHED = ".unfinished"  # written first when a library is made or discarded, removed when that is done
PEOPLE_LOCK = ".people.lock"
FORGETTING = ".forgetting"  # written first when a person is forgotten, removed when that is done (`headsearch.store.forgetting`)
FORGOTTEN_DATABASE = ".library.duckdb.forgetting"  # the database written again without the person, renamed over DATABASE


def existing_model(root: Path) -> ModelInfo | None:
    """The model named by the manifest of the library at `root` (None when there is none or it is unreadable).
    Reading it costs no database: a query starts loading the model while the database's code loads."""
    try:
        return ModelInfo.from_dict(json.loads((Path(root) / MANIFEST).read_text())["model"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_model(root: Path, made_by: ModelInfo, model: ModelInfo) -> None:
    """Refuse to mix vectors of `model` into the library at `root`, whose vectors `made_by` made."""
    if not made_by.same_vectors_as(model):
        raise ModelMismatch(
            f"{root}: library vectors were made by {made_by.label()}, not by {model.label()}; use --model "
            f"{made_by.name}, a new --library, or re-embed this library with `headsearch reindex --model "
            f"{model.source or model.name} --library {root}` (a model change means re-embedding every video)"
        )

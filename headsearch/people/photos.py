"""Reference photos of a person: heads a user gives for someone (`headsearch people add-photo ID PHOTO`, the
person page's upload), embedded with the library's model, the head crop kept in the library folder
(`person-photos/<id>.jpg`). `query --person` and the person page search the library with them too, and a
person's moments are scored against them.

A photo's vectors belong to the model that made them: after `headsearch reindex` to another model they are left
aside (and said so) until the photo is given again.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from headsearch.basics.errors import HeadsearchError, NoHeadFound
from headsearch.basics.files import write_bytes_atomic
from headsearch.basics.images import encode_jpeg
from headsearch.basics.media import fingerprint
from headsearch.embedding.photo_heads import PhotoEmbedder
from headsearch.people.persons import _person_row
from headsearch.store.layout import PERSON_PHOTOS
from headsearch.store.library import Library
from headsearch.store.rows import PersonPhotoRow
from schemas.records import VectorKind


def model_key(library: Library) -> str:
    """Which model's vectors a photo holds: the library's name and version."""
    return f"{library.model.name} {library.model.version}"


def add_reference_photo(library: Library, person_id: int, path: str, fingerprint: str, crop_jpeg: bytes, face_visible: bool,
                        vectors: dict[VectorKind, np.ndarray]) -> PersonPhotoRow:
    """Keep a head (its crop as JPEG and its vectors from the library's model) as a reference photo of a person."""
    with library.people_writing() as store:
        _person_row(store, person_id, library.root)
        if any(p.fingerprint == fingerprint and p.person_id == person_id for p in store.photos(person_id)):
            raise HeadsearchError(f"{Path(path).name} is already a reference photo of person {person_id}")
        photo_id = store.next_id("person_photos")
        crop = f"{PERSON_PHOTOS}/{photo_id}.jpg"
        try:
            (library.root / PERSON_PHOTOS).mkdir(exist_ok=True)
            write_bytes_atomic(library.root / crop, crop_jpeg)
        except OSError as e:
            raise HeadsearchError(f"{library.root}: cannot keep the photo's head crop ({e.strerror or e})") from e
        unit = {kind: (v / max(float(np.linalg.norm(v)), 1e-12)).astype("<f4").tobytes() for kind, v in vectors.items() if np.any(v)}
        row = PersonPhotoRow(id=photo_id, person_id=person_id, path=str(path), fingerprint=fingerprint, crop=crop, model=model_key(library),
                             face_visible=bool(face_visible), id_vector=unit.get(VectorKind.ID), head_vector=unit.get(VectorKind.HEAD),
                             added_at=time.time())
        store.add_photo(row)
        return row


def add_photo_file(library: Library, person_id: int, path: Path, name: str | None = None,
                   photos: PhotoEmbedder | None = None) -> PersonPhotoRow:
    """A photo file as a reference photo of a person: its largest head (found by its face, as the indexer finds
    heads), cut and embedded as the indexer does with the library's model (`photos`: the library's photo embedder,
    when the caller keeps one). `name`: how the user named the file (an upload's name), else its path."""
    path = Path(path)
    photos = photos or PhotoEmbedder(library_root=library.root)
    try:
        embedded = photos.heads(path, str(name or path))[0]
    except NoHeadFound:
        raise NoHeadFound(f"{name or path}: no face found (a reference photo shows the person's face)") from None
    head = embedded.head
    return add_reference_photo(library, person_id, name or str(path.resolve()), fingerprint(path, path.stat().st_size),
                               encode_jpeg(head.crop.image, 90), head.face_visible, embedded.vectors)


def reference_photos(library: Library, person_id: int) -> list[PersonPhotoRow]:
    with library.people_reading() as store:
        return store.photos(person_id)


def reference_photo(library: Library, photo_id: int) -> PersonPhotoRow | None:
    with library.people_reading() as store:
        return next((p for p in store.photos() if p.id == photo_id), None)


def remove_reference_photo(library: Library, person_id: int, photo_id: int) -> None:
    with library.people_writing() as store:
        found = [p for p in store.photos(person_id) if p.id == photo_id]
        if not found:
            raise HeadsearchError(f"person {person_id} has no reference photo {photo_id}")
        store.delete_photo(photo_id)
    (library.root / found[0].crop).unlink(missing_ok=True)


def reference_vectors(library: Library, person_id: int) -> tuple[list[dict[VectorKind, np.ndarray]], int]:
    """The vectors of a person's reference photos made by the library's model (kind -> vector, one dict a photo), and
    how many photos were left aside because another model made them."""
    photos = reference_photos(library, person_id)
    key = model_key(library)
    out = []
    for p in photos:
        if p.model != key:
            continue
        vectors = {}
        if p.id_vector is not None:
            vectors[VectorKind.ID] = np.frombuffer(p.id_vector, "<f4")
        if p.head_vector is not None:
            vectors[VectorKind.HEAD] = np.frombuffer(p.head_vector, "<f4")
        if vectors:
            out.append(vectors)
    return out, len(photos) - len(out)


def stacked(vectors: list[dict[VectorKind, np.ndarray]]) -> dict[VectorKind, np.ndarray]:
    """Photos' vectors as rows per kind (what `person_moments` scores against)."""
    out: dict[VectorKind, list[np.ndarray]] = {}
    for v in vectors:
        for kind, x in v.items():
            out.setdefault(kind, []).append(x)
    return {kind: np.stack(xs).astype(np.float32) for kind, xs in out.items()}

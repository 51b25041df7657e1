"""The reference person a video is compared with: a template of one person's heads, from photos (several photos of one
person hold a look better than one), from the sightings of a clip's main person, or from a person of a library.

A template is the renormalised mean of its heads' unit vectors, per kind. Heads that show a face carry identity:
where any head shows one, the template is made of those heads only (a head vector of a faceless head has an empty
face part, and a mean across both would mix two scales); a template made only of faceless heads (the back of a
head, `--whole-image`) has no identity vector and is compared by the look of the head alone.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from headsearch.basics.errors import HeadsearchError
from headsearch.basics.media import media_kind
from headsearch.models.base import mean_vector
from headsearch.people.listing import find_person, person_looks
from headsearch.people.photos import reference_vectors
from headsearch.store.library import Library
from schemas.records import HeadTrack, MediaKind, VectorKind

Vectors = dict[VectorKind, np.ndarray]


@dataclass(frozen=True)
class ReferenceHead:
    """One head of a reference: its vectors, whether it shows a face, a picture of it (JPEG) where there is one."""

    vectors: Vectors
    face: bool
    picture: bytes | None = None
    size: float = 0.0  # its area in its image's pixels (the largest face pictures the reference)


@dataclass
class Reference:
    """One person's template: a unit vector per kind (no identity vector when none of its heads showed a face)."""

    name: str
    vectors: Vectors
    sources: list[str] = field(default_factory=list)  # what it was made of, in words
    heads: int = 0  # heads averaged into it
    picture: bytes | None = None  # a JPEG of one of its heads, for reports

    @property
    def face(self) -> bool:
        return VectorKind.ID in self.vectors

    def to_dict(self) -> dict:
        return {"name": self.name, "sources": list(self.sources), "heads": self.heads, "face": self.face}

    @classmethod
    def of(cls, name: str, heads: Sequence[ReferenceHead], sources: Sequence[str]) -> Reference:
        """The template of these heads: the mean of those with a face where there are some, else of all."""
        faced = [h for h in heads if h.face and VectorKind.ID in h.vectors]
        chosen = faced or list(heads)
        kinds = {kind for h in chosen for kind in h.vectors}
        if not kinds:
            raise HeadsearchError(f"{name}: the reference has no vectors")
        vectors = {kind: mean_vector(h.vectors[kind] for h in chosen if kind in h.vectors) for kind in kinds}
        pictured = [h for h in chosen if h.picture is not None]
        picture = max(pictured, key=lambda h: (h.face, h.size)).picture if pictured else None
        return cls(name, vectors, list(sources), len(chosen), picture)


def photo_files(paths: Sequence[Path]) -> list[Path]:
    """Photos named, with the photos inside named folders (not recursively, sorted by name)."""
    out: list[Path] = []
    for p in paths:
        p = Path(p).expanduser()
        if p.is_dir():
            inside = sorted(f for f in p.iterdir() if f.is_file() and media_kind(f) == MediaKind.IMAGE)
            if not inside:
                raise HeadsearchError(f"{p}: no photos in this folder")
            out += inside
        elif not p.exists():
            raise HeadsearchError(f"{p}: no such file")
        elif media_kind(p) != MediaKind.IMAGE:
            raise HeadsearchError(f"{p}: not a photo (a reference clip is --ref-video CLIP)")
        else:
            out.append(p)
    return out


def track_heads(track: HeadTrack) -> list[ReferenceHead]:
    """The embedded sightings of one head track (a clip's main person), its thumbnail as the picture."""
    seen = [o for o in track.observations if o.embeddings]
    best = track.observations[track.best_index] if track.observations else None
    return [ReferenceHead(o.embeddings, o.face_visible, track.thumbnail if o is best else None, o.head.area) for o in seen]


def person_heads(library: Library, key: str | int) -> tuple[str, list[ReferenceHead], str]:
    """A person of a library (a name or an id) as heads: its reference photos where it has some, else the tracks of
    its main look (its largest group of tracks), each as its mean vectors; with its name and what it was made of."""
    person = find_person(library, key)
    photos, _ = reference_vectors(library, person.id)
    picture = None
    with library.people_reading() as store:
        rows = store.tracks(track_ids=person.tracks[:1])
        if rows and (library.root / rows[0].thumbnail).is_file():
            picture = (library.root / rows[0].thumbnail).read_bytes()
        if photos:
            heads = [ReferenceHead(v, VectorKind.ID in v, picture) for v in photos]
            made = f"{len(photos)} reference photo{'s' if len(photos) != 1 else ''}"
        else:
            looks = person_looks(library, person.id)
            main = list(looks[0]) if looks else list(person.tracks)
            ids = store.track_vectors(VectorKind.ID, main)
            head = store.track_vectors(VectorKind.HEAD, main) if VectorKind.HEAD in library.model.kinds else {}
            heads = []
            for tr in main:
                v = {kind: x[tr] for kind, x in ((VectorKind.ID, ids), (VectorKind.HEAD, head)) if tr in x}
                if v:
                    heads.append(ReferenceHead(v, VectorKind.ID in v, picture))
            made = f"{len(heads)} track{'s' if len(heads) != 1 else ''} of its main look"
    if not heads:
        raise HeadsearchError(f"{person.label()} has no vectors in {library.root}")
    return person.name or person.label(), heads, f"{person.label()} of {library.root} ({made})"

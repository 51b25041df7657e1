"""How two head vectors compare. Where both sightings show a face, their head vectors' cosine. A model whose
head vector ends in an appearance part (`ModelSpec.appearance_dims`: features of the whole head without the
face, e.g. `sface+lite0`) compares a sighting without a face on that part alone: its face part is empty, and a
cosine of one full and one part-empty vector would mix two scales. The search engine, the benchmarks and
people's looks all compare through here."""
from __future__ import annotations

import numpy as np

from headsearch.models.base import l2_normalise


def appearance_part(head: np.ndarray, appearance_dims: int) -> np.ndarray:
    """The appearance part of head vectors (rows), unit length."""
    return l2_normalise(np.atleast_2d(head)[:, -appearance_dims:])


def has_face(identity: np.ndarray | None, n: int) -> np.ndarray:
    """Which rows have an identity vector (a model gives none, a zero row, to a sighting without a face)."""
    if identity is None:
        return np.zeros(n, bool)
    return np.abs(np.atleast_2d(identity)).sum(axis=1) > 0


def head_scores(query: np.ndarray, query_face: bool, stored: np.ndarray, stored_face: np.ndarray, appearance_dims: int = 0) -> np.ndarray:
    """The head similarity of one query head vector to stored head vectors (rows)."""
    stored = np.atleast_2d(stored)
    scores = stored @ query
    if appearance_dims:
        app = appearance_part(stored, appearance_dims) @ appearance_part(query, appearance_dims)[0]
        scores = np.where(np.asarray(stored_face, bool) & bool(query_face), scores, app)
    return scores


def head_matrix(head: np.ndarray, face: np.ndarray, appearance_dims: int = 0) -> np.ndarray:
    """Head similarities of every pair of rows (float64), compared as `head_scores` compares them."""
    head = l2_normalise(np.asarray(head, np.float64)).astype(np.float64)
    sim = head @ head.T
    if appearance_dims:
        app = appearance_part(head, appearance_dims).astype(np.float64)
        both = np.outer(face, face)
        sim = np.where(both, sim, app @ app.T)
    return sim

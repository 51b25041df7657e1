"""Agglomerative clustering of unit vectors by average cosine similarity, with cannot-link
constraints: people (tracks into persons) and the dataset builder (segments into identities)."""
from __future__ import annotations

import numpy as np


def average_linkage(vectors: np.ndarray, weights: np.ndarray, threshold: float, blocked: np.ndarray) -> np.ndarray:
    """Agglomerative clustering by average cosine similarity. Row i of `vectors` is the mean of
    `weights[i]` unit vectors (a track: one vector of weight 1; a person: the mean of its tracks), so
    the mean pairwise similarity of two clusters is the dot product of their means. Merges the most
    similar pair while it is >= threshold and `blocked` (n x n bool) does not forbid it; forbidding
    is inherited by merged clusters. Returns each row's cluster, numbered by its first row."""
    n = len(vectors)
    if n == 0:
        return np.zeros(0, np.int64)
    u = np.asarray(vectors, np.float64)
    w = np.asarray(weights, np.float64).copy()
    sums = (u * w[:, None]) @ (u * w[:, None]).T  # sum of pairwise similarities between clusters
    blocked = np.asarray(blocked, bool).copy()
    avg = sums / np.outer(w, w)
    np.fill_diagonal(avg, -np.inf)
    avg[blocked] = -np.inf
    alive = np.ones(n, bool)
    parent = np.arange(n)
    while True:
        a, b = divmod(int(np.argmax(avg)), n)
        if not avg[a, b] >= threshold:
            break
        a, b = min(a, b), max(a, b)
        sums[a, :] += sums[b, :]
        sums[:, a] = sums[a, :]
        w[a] += w[b]
        blocked[a, :] |= blocked[b, :]
        blocked[:, a] = blocked[a, :]
        alive[b] = False
        parent[parent == b] = a
        row = sums[a] / (w[a] * w)
        row[~alive | blocked[a]] = -np.inf
        row[a] = -np.inf
        avg[a, :] = row
        avg[:, a] = row
        avg[b, :] = -np.inf
        avg[:, b] = -np.inf
    roots: dict[int, int] = {}
    return np.array([roots.setdefault(int(p), len(roots)) for p in parent], np.int64)


def blocked_cluster_pairs(vectors: np.ndarray, labels: np.ndarray, threshold: float, blocked: np.ndarray) -> int:
    """Pairs of final clusters whose average similarity reaches `threshold` but that a cannot-link
    kept apart (how much the constraints changed the result)."""
    if len(labels) == 0:
        return 0
    members = np.zeros((len(labels), int(labels.max()) + 1))
    members[np.arange(len(labels)), labels] = 1.0
    sums = members.T @ np.asarray(vectors, np.float64)  # each cluster's sum of vectors
    sizes = members.sum(axis=0)
    mean = (sums @ sums.T) / np.outer(sizes, sizes)
    kept_apart = (members.T @ np.asarray(blocked, np.float64) @ members) > 0
    return int(np.triu(kept_apart & (mean >= threshold), 1).sum())

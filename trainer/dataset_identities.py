"""Step 4 of the dataset builder (`trainer.dataset`): identities across videos. Agglomerative clustering (average
linkage on cosine similarity) of the segments' best-face teacher embeddings, merging while the similarity is at
least ``cluster_threshold``, never merging two segments seen in the same sampled frame (cannot-link: same video,
same shot, a common frame index). Defaults per teacher in its spec (``ModelSpec.cluster_threshold``) (dlib-resnet
0.95: see there). A labelled one-person video's person takes its label instead (`label_video_segments`).

Relations: same segment = same appearance state (R1), same identity other segment (R2), other identity (R3).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from headsearch.people.clustering import average_linkage, blocked_cluster_pairs
from schemas.records import ModelInfo
from trainer.dataset_inputs import LabelPhoto
from trainer.dataset_segments import Segment
from trainer.dataset_summary import BuildSummary

FALLBACK_CLUSTER_THRESHOLD = 0.5


def default_cluster_threshold(teacher: str | ModelInfo) -> float:
    """The teacher's cosine of best-face vectors at which segments are one person, as its spec says
    (`ModelSpec.cluster_threshold`; the measurements behind each are in its module), else a fallback."""
    from headsearch.models.registry import find_spec

    spec = find_spec(teacher)
    return spec.cluster_threshold if spec is not None and spec.cluster_threshold is not None else FALLBACK_CLUSTER_THRESHOLD


@dataclass
class ClusterResult:
    labels: np.ndarray  # (n,) int, clusters numbered by first member
    blocked_pairs: int  # final cluster pairs above the threshold kept apart by a cannot-link


def cluster_with_cannot_link(vectors: np.ndarray, threshold: float, cannot_link: Iterable[tuple[int, int]] = ()) -> ClusterResult:
    """Average-linkage agglomerative clustering on cosine similarity (`headsearch.people.clustering`), merging
    the most similar pair of clusters while their mean pairwise similarity is >= threshold and no
    cannot-link pair joins them. O(n^2) memory, O(n^3) worst-case time: fine for thousands of segments."""
    v = np.asarray(vectors, dtype=np.float64)
    n = len(v)
    if n == 0:
        return ClusterResult(np.zeros(0, np.int64), 0)
    v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    blocked = np.zeros((n, n), bool)
    for a, b in cannot_link:
        blocked[a, b] = blocked[b, a] = True
    labels = average_linkage(v, np.ones(n), threshold, blocked)
    return ClusterResult(labels, blocked_cluster_pairs(v, labels, threshold, blocked))


def label_video_segments(segments: list[Segment], labelled: dict[Path, LabelPhoto], threshold: float,
                         summary: BuildSummary) -> list[Segment]:
    """Give the labelled person's segments of each labelled one-person video its identity and look; return the
    other segments (unlabelled videos) for clustering. The labelled person is the longest segment and those whose
    best face matches it (cosine >= threshold); other people in a labelled video are left out."""
    rest, by_video = [], defaultdict(list)
    for seg in segments:
        (by_video[Path(seg.video)] if Path(seg.video) in labelled else rest).append(seg)
    for path, segs in by_video.items():
        label = labelled[path]
        main = max(segs, key=lambda x: len(x.obs))
        ref = main.best_teacher_vector / max(float(np.linalg.norm(main.best_teacher_vector)), 1e-12)
        for seg in segs:
            v = seg.best_teacher_vector
            if seg is main or float(np.dot(ref, v / max(float(np.linalg.norm(v)), 1e-12))) >= threshold:
                seg.identity, seg.state = label.identity, label.state
            else:
                summary.labelled_video_segments_dropped += 1
    summary.labelled_video_segments = sum(1 for segs in by_video.values() for x in segs if x.identity)
    return rest


def cannot_link_pairs(segments: Sequence[Segment]) -> list[tuple[int, int]]:
    """Pairs of segments seen in one sampled frame of one shot: two people, however alike."""
    cannot = []
    by_shot: dict[tuple[str, int], list[int]] = defaultdict(list)
    for i, s in enumerate(segments):
        by_shot[(s.part.key, s.shot)].append(i)
    for members in by_shot.values():
        frames = {i: segments[i].frames for i in members}
        for x, i in enumerate(members):
            for j in members[x + 1:]:
                if frames[i] & frames[j]:
                    cannot.append((i, j))
    return cannot


def cluster_identities(segments: Sequence[Segment], threshold: float, dim: int, summary: BuildSummary) -> None:
    """Step 4: name each video segment's identity (a cluster of best faces) and state (the segment)."""
    vectors = np.stack([s.best_teacher_vector for s in segments]) if segments else np.zeros((0, dim))
    cannot = cannot_link_pairs(segments)
    summary.cannot_link_pairs = len(cannot)
    clusters = cluster_with_cannot_link(vectors, threshold, cannot)
    summary.cannot_link_blocked = clusters.blocked_pairs
    width = max(4, len(str(int(clusters.labels.max()) + 1 if len(clusters.labels) else 0)))
    for s, c in zip(segments, clusters.labels, strict=True):
        s.identity = f"vid{int(c) + 1:0{width}d}"
        s.state = f"{s.identity}/{s.name}"
    summary.video_identities = len(set(clusters.labels.tolist()))

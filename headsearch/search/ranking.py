"""Appearance-aware ranking of query hits: the same person first, in the same look before another look.

With thresholds (a library's calibration or the model's bundled ones), `rank_hits` orders hits in tiers:
same person and same look (`same_look`), same person in another look (`other_look`), then everybody else
(`other_person`). Inside the two same-person tiers hits are ordered by their head score (whole-head
appearance; the identity score for models without head vectors), the rest by their identity score. Each hit's
`score` is the score it was ranked by. A hit found by the look of the head alone (no face on one side:
`matched_without_face`) is ranked by its appearance score, after the hits of its tier that a face vouches for.
`identity` ranking (or no thresholds) is the plain identity order.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from schemas.records import SearchHit, Tier

RANKINGS = ("appearance", "identity")
TIER_ORDER = {Tier.SAME_LOOK: 0, Tier.OTHER_LOOK: 1, Tier.OTHER_PERSON: 2}


def rank_hits(hits: Sequence[SearchHit], ranking: str = "appearance") -> list[SearchHit]:
    """The hits in `ranking` order (see the module docstring), each with `score` set to what ranked it."""
    if ranking not in RANKINGS:
        raise ValueError(f"unknown ranking {ranking!r}; expected one of {', '.join(RANKINGS)}")
    if ranking == "identity" or any(h.tier is None for h in hits):
        return sorted((replace(h, score=h.identity_score) for h in hits), key=lambda h: -h.score)

    def ranked_by(h: SearchHit) -> float:
        if h.matched_without_face and h.appearance_score is not None:
            return h.appearance_score
        if h.tier == Tier.OTHER_PERSON or h.head_score is None:
            return h.identity_score
        return h.head_score

    scored = [replace(h, score=ranked_by(h)) for h in hits]
    # Inside a tier, hits the face vouches for come before those the look of the head alone found.
    return sorted(scored, key=lambda h: (TIER_ORDER[h.tier], h.matched_without_face, -h.score, -h.identity_score))

"""Appearance-aware ranking: same person first, same look before other look (by head score), then the rest by
identity; `--rank identity` is the identity order; every hit says what it was ranked by."""
from __future__ import annotations

import pytest

from headsearch.evaluation.thresholds import Thresholds
from headsearch.search.ranking import rank_hits
from schemas.records import SearchHit, Tier

THRESHOLDS = Thresholds(far=1e-3, identity=0.5, same_look=0.7, model="m", version="v")


def hit(n: int, id_score: float, head_score: float | None) -> SearchHit:
    return SearchHit(track_id=n, video="v.mp4", start=0.0, end=1.0, time=0.5, score=id_score, thumbnail="t.jpg",
                     tier=THRESHOLDS.tier(id_score, head_score), head_score=head_score, id_score=id_score)


def test_tiers_then_head_score_then_identity():
    hits = [
        hit(1, 0.95, 0.60),  # same person, other look (head 0.60 <= 0.7), the best identity score
        hit(2, 0.70, 0.80),  # same look
        hit(3, 0.80, 0.75),  # same look, lower head score than 2
        hit(4, 0.45, 0.90),  # another person (identity below 0.5), whatever its head score
        hit(5, 0.55, 0.30),  # other look
        hit(6, 0.49, 0.10),  # another person with a higher identity score than 4
    ]
    ranked = rank_hits(hits)
    assert [h.track_id for h in ranked] == [2, 3, 1, 5, 6, 4]
    assert [h.tier for h in ranked] == [Tier.SAME_LOOK] * 2 + [Tier.OTHER_LOOK] * 2 + [Tier.OTHER_PERSON] * 2
    assert [h.score for h in ranked] == [0.80, 0.75, 0.60, 0.30, 0.49, 0.45]  # what each was ranked by
    assert all(h.id_score == h.identity_score for h in ranked)
    identity = rank_hits(hits, "identity")
    assert [h.track_id for h in identity] == [1, 3, 2, 5, 6, 4]
    assert [h.score for h in identity] == sorted((h.id_score for h in hits), reverse=True)


def test_without_thresholds_or_head_vectors():
    plain = [SearchHit(n, "v", 0, 1, 0.5, s, "t") for n, s in ((1, 0.3), (2, 0.9), (3, 0.6))]
    assert [h.track_id for h in rank_hits(plain)] == [2, 3, 1]  # uncalibrated: identity order
    no_head = [hit(1, 0.6, None), hit(2, 0.9, None), hit(3, 0.4, None)]
    ranked = rank_hits(no_head)  # a face model: its identity score stands for the look too
    assert [h.track_id for h in ranked] == [2, 1, 3] and [h.tier for h in ranked] == [Tier.SAME_LOOK, Tier.OTHER_LOOK, Tier.OTHER_PERSON]
    d = ranked[0].to_dict()
    assert {"score", "id_score", "head_score", "tier"} <= set(d) and d["tier"] == "same_look"
    with pytest.raises(ValueError, match="ranking"):
        rank_hits(no_head, "nope")

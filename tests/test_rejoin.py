"""The join rule within a shot (`indexer.rejoin`) on made-up pieces: pieces that never overlap and agree are one person;
pieces on screen at once, pieces of two shots, ambiguous candidates (the ratio test), two faceless pieces and a faceless
piece without its body are never joined; a body that disagrees vetoes a join; redaction's choice takes in a chosen
track's joined pieces. Pure functions, no media, no model."""
from __future__ import annotations

import numpy as np

from indexer.rejoin import DEFAULT_BARS, JoinBars, PieceCues, body_region, join_pieces, with_joins
from schemas.records import JOIN_CUE_HEAD, JOIN_CUE_HEAD_BODY, Box

DIM = 16


def _axis(i: int) -> np.ndarray:
    v = np.zeros(DIM, np.float32)
    v[i] = 1.0
    return v


def _near(base: np.ndarray, cos: float, away: int) -> np.ndarray:
    """A unit vector whose cosine with `base` (a unit vector) is `cos`, turned towards axis `away`."""
    return (cos * base + np.sqrt(1 - cos * cos) * _axis(away)).astype(np.float32)


PERSON = _axis(0)
OTHER = _axis(1)
BODY = _axis(2)


def _piece(start: float, end: float, head: np.ndarray | None = PERSON, *, shot: int = 0, face: bool = True,
           body: np.ndarray | None = None, height: float = 60.0) -> PieceCues:
    return PieceCues(shot, start, end, face, head if face else None, head, height, height, body, body)


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)


def test_pieces_that_never_overlap_and_agree_are_one_person():
    joins = join_pieces([_piece(0, 2), _piece(3, 5, _near(PERSON, 0.8, 4))])
    assert joins[0] is None
    assert joins[1] is not None and joins[1].to == 0 and joins[1].cue == JOIN_CUE_HEAD


def test_a_third_piece_joins_the_person_first_piece():
    joins = join_pieces([_piece(0, 1), _piece(2, 3), _piece(4, 5)])
    assert [j.to if j else None for j in joins] == [None, 0, 0]


def test_pieces_on_screen_at_once_stay_apart():
    """Two heads on screen at the same moment are two people, however alike (twins, one look)."""
    assert join_pieces([_piece(0, 3), _piece(2, 5)]) == [None, None]
    # a group that holds a piece on screen together with the new one is no candidate either
    joins = join_pieces([_piece(0, 1), _piece(2, 6, OTHER), _piece(3, 4, OTHER)])
    assert joins[2] is None


def test_never_across_a_cut():
    assert join_pieces([_piece(0, 2, shot=0), _piece(3, 5, shot=1)]) == [None, None]


def test_a_head_that_disagrees_is_not_joined():
    assert _cos(PERSON, OTHER) < DEFAULT_BARS.head
    assert join_pieces([_piece(0, 2), _piece(3, 5, OTHER)]) == [None, None]


def test_the_ratio_test_refuses_an_ambiguous_best():
    """Two earlier people the new piece is about as like: neither is chosen; one clearly better: it is."""
    a, b = _axis(10), _axis(11)
    between = ((a + b) / np.sqrt(2)).astype(np.float32)  # as near to a as to b (0.71 each)
    assert join_pieces([_piece(0, 1, a), _piece(0, 1, b), _piece(2, 3, between)])[2] is None
    clearly_a = (0.9 * a + 0.3 * b) / np.linalg.norm([0.9, 0.3])  # 0.95 with a, 0.32 with b
    joins = join_pieces([_piece(0, 1, a), _piece(0, 1, b), _piece(2, 3, clearly_a.astype(np.float32))])
    assert joins[2] is not None and joins[2].to == 0
    loose = JoinBars(ratio=1.0)  # without the ratio test the ambiguous one would be taken
    assert join_pieces([_piece(0, 1, a), _piece(0, 1, b), _piece(2, 3, between)], loose)[2] is not None


def test_a_faceless_piece_never_starts_a_person():
    """Two pieces without a face are never joined to each other, however alike; a faceless piece joins a person whose
    face was seen (before or after it), with the body cue as well (the stricter bar for backs)."""
    back, back2 = _piece(0, 2, face=False, body=BODY), _piece(3, 5, face=False, body=BODY)
    assert join_pieces([back, back2]) == [None, None]
    joins = join_pieces([_piece(0, 2, body=BODY), _piece(3, 5, face=False, body=BODY)])
    assert joins[1] is not None and joins[1].cue == JOIN_CUE_HEAD_BODY
    joins = join_pieces([_piece(0, 2, face=False, body=BODY), _piece(3, 5, body=BODY)])
    assert joins[1] is not None and joins[1].to == 0
    # without the body cue a faceless piece is not joined on its head's look alone
    assert join_pieces([_piece(0, 2), _piece(3, 5, face=False)]) == [None, None]
    # nor where its head is far larger or smaller than the person's last was (another person, nearer or further away)
    assert join_pieces([_piece(0, 2, body=BODY, height=140), _piece(3, 5, face=False, body=BODY, height=60)]) == [None, None]
    assert join_pieces([_piece(0, 2, body=BODY, height=70), _piece(3, 5, face=False, body=BODY, height=60)])[1] is not None


def test_a_body_that_disagrees_vetoes_the_join():
    other_body = _axis(5)
    assert _cos(BODY, other_body) < DEFAULT_BARS.body
    assert join_pieces([_piece(0, 2, body=BODY), _piece(3, 5, body=other_body)]) == [None, None]
    assert join_pieces([_piece(0, 2, body=BODY), _piece(3, 5, body=BODY)])[1].cue == JOIN_CUE_HEAD_BODY


def test_bodies_are_described_only_for_a_join_about_to_be_made():
    """The head cue and the ratio test come first: bodies (Lite0 on two crops a track) are asked for the pieces of the
    join about to be made alone, never for a candidate the head rules out."""
    asked: list[list[tuple[int, bool]]] = []
    pieces = [_piece(0, 2), _piece(0, 2, OTHER), _piece(3, 5), _piece(6, 7, _axis(7)), _piece(0, 9, shot=1)]
    joins = join_pieces(pieces, DEFAULT_BARS, lambda indexes: asked.append(sorted(indexes)))
    assert [j.to if j else None for j in joins] == [None, None, 0, None, None]
    assert asked == [[(0, True), (2, False)]]  # the earlier piece's last body, the later one's first


def test_the_body_region_needs_a_quarter_of_it_in_frame():
    assert body_region(Box(100, 100, 150, 150), 640, 360) == Box(75, 150, 175, 250)
    assert body_region(Box(100, 330, 150, 360), 640, 360) is None  # the head at the bottom edge: no body in frame
    assert body_region(Box(100, 200, 150, 250), 640, 280) is not None  # 30 of 100 rows in frame


def test_redaction_takes_in_the_joined_pieces_of_a_chosen_track():
    joined_to = {1: None, 2: 1, 3: None, 4: 1, 5: 3}
    assert with_joins({2}, joined_to) == {1, 2, 4}
    assert with_joins({3}, joined_to) == {3, 5}
    assert with_joins(set(), joined_to) == set()

"""A page about one person asks the people core for that person alone (issue 51): its merge suggestions (its row of
the similarities), its listing (its tracks alone read), a track's inbox entry; each is what the library's whole list
says of that person or track, read from a real library of photos of two people."""
from __future__ import annotations

import cv2
import pytest
from conftest import AMY_DIR, FACES, needs_data, run

from headsearch.people.listing import find_person, inbox, list_people, merge_suggestions
from headsearch.store.library import Library

pytestmark = [needs_data, pytest.mark.slow]

AMY = [AMY_DIR / f"amy{i}.png" for i in (1, 2, 3)]
RAJ = [FACES / "raj" / f"raj{i}.png" for i in (1, 2, 3)]


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Library:
    """Three photos of Amy, three of Raj, and Amy blurred and darkened past the sharpness gate (in the inbox)."""
    root = tmp_path_factory.mktemp("one-person")
    blurred = root / "amy1-blurred.png"
    cv2.imwrite(str(blurred), (cv2.GaussianBlur(cv2.imread(str(AMY[0])), (0, 0), 4) * 0.4).astype("uint8"))
    run("index", *AMY, *RAJ, blurred, "--library", root / "library", "-q")
    run("people", "--library", root / "library")
    return Library.open(root / "library")


def test_one_persons_suggestions_and_listing_are_the_whole_lists_of_them(library):
    people = list_people(library)
    assert len(people) == 2, [p.to_dict() for p in people]  # Amy and Raj
    every = merge_suggestions(library, bar=-1.0)  # the bar at the floor: Amy and Raj are a pair to ask about
    assert len(every) == 1
    for p in people:
        mine = merge_suggestions(library, bar=-1.0, person_id=p.id)
        whole = [s for s in every if p.id in (s.a, s.b)]
        assert [(s.a, s.b) for s in mine] == [(s.a, s.b) for s in whole]
        assert all(abs(a.score - b.score) <= 1e-4 for a, b in zip(mine, whole, strict=True))
        assert [q.to_dict() for q in list_people(library, only=p.id)] == [p.to_dict()]
        assert find_person(library, p.id).to_dict() == next(q for q in list_people(library, with_looks=False, include_hidden=True,
                                                                                   include_unlisted=True) if q.id == p.id).to_dict()
    assert merge_suggestions(library, bar=-1.0, person_id=10**9) == [] and list_people(library, only=10**9) == []


def test_one_tracks_inbox_entry_is_the_whole_inboxs(library):
    waiting = inbox(library)
    assert waiting, "the blurred photo's track waits in the inbox"
    for w in waiting:
        assert inbox(library, only=[w.track_id]) == [w]
    grouped = list_people(library)[0].tracks[0]
    assert inbox(library, only=[grouped]) == [] and inbox(library, only=[10**9]) == []

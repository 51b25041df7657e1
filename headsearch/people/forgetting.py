"""Forgetting a person (`headsearch people forget PERSON`, the person page's "forget"): everything the library holds of
them goes, in one step a kill cannot leave half done, and the library keeps a record of it (`headsearch people
forgotten`). The store does it (`headsearch.store.forgetting`); here a person is found by name or id, after new
tracks have joined the people they are (so a file indexed again since is forgotten too). Only the person's tracks go:
a track in the inbox that is likely theirs is named first (`likely_theirs`), to be moved into the person if it is.

The videos stay indexed, with everyone else's tracks. A file analysed again later (changed, or `headsearch reindex`)
finds the person's head again, as someone new: forget them again then.
"""
from __future__ import annotations

from headsearch.people.listing import Person, find_person, inbox
from headsearch.people.persons import update_people
from headsearch.store.library import Library
from headsearch.store.rows import ForgottenRow


def person_to_forget(library: Library, key: str | int) -> Person:
    """The person named or numbered `key`, with every track that is theirs now (PersonNotFound when none is)."""
    update_people(library)
    return find_person(library, key)


def likely_theirs(library: Library, person: Person) -> list[int]:
    """Tracks in the inbox most like the person, and as alike as one person's tracks are: not theirs (a quality gate held
    them back, or a user said they are not), so not forgotten with them; `people move` puts them in the person first."""
    return sorted(t.track_id for t in inbox(library) if t.likely and t.nearest and t.nearest["id"] == person.id)


def forget(library: Library, person: Person) -> ForgottenRow:
    """Forget a person found by `person_to_forget`; returns the record the library keeps of it."""
    return library.forget_person(person.id)


def forgotten(library: Library) -> list[ForgottenRow]:
    """The persons forgotten, oldest first: when, their id and name, how much was removed."""
    return library.forgotten()

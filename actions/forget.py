"""`headsearch people forget` as one action for the CLI and the web app (`forget`, given a `ForgetRequest`): a person
forgotten for good
(`headsearch.people.forgetting.forget`: the library written again without them), then every file of the library folder,
and of the folders named with it (the web app's cache), searched for what is left of them. Its result (`Forgetting`)
is what `people forget --json` prints and the web app's forget answers (`to_dict()`)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from actions.requests import ForgetRequest
from headsearch.people.forgetting import forget as forget_for_good
from headsearch.people.forgetting import likely_line, likely_theirs, person_to_forget
from headsearch.people.listing import Person
from headsearch.store.leftovers import Check
from headsearch.store.library import Library
from headsearch.store.rows import ForgottenRow


@dataclass(frozen=True)
class Forgetting:
    """What a forgetting removed (the library's record of it), the inbox tracks likely theirs (not forgotten with them),
    and what the search for what is left found."""

    person: Person
    row: ForgottenRow
    check: Check
    likely: tuple[int, ...] = ()

    @property
    def note(self) -> str | None:
        """The inbox tracks likely theirs, in words (None: none)."""
        return likely_line(list(self.likely), self.person.id) if self.likely else None

    def to_dict(self) -> dict:
        return {"forgotten": asdict(self.row), "likely_theirs": list(self.likely), "note": self.note, "searched": self.check.line(),
                "found": list(self.check.found)}


def forget_person(library: Library, person: Person, keep_name: bool = False, also: tuple[Path, ...] = (),
                  likely: list[int] | None = None, kept: Callable[[], None] | None = None) -> Forgetting:
    """Forget `person` for good and search the library folder (and `also`) for what is left; `likely`: the inbox tracks
    likely theirs (default: worked out now, before they go); `kept`: what else keeps copies of them drops them, before the
    forgetting and again after it (the web app's kept searches and jobs)."""
    likely = likely_theirs(library, person) if likely is None else likely
    if kept is not None:
        kept()
    row, check = forget_for_good(library, person, keep_name=keep_name, also=also)
    if kept is not None:
        kept()  # and what was kept while it ran
    return Forgetting(person, row, check, tuple(likely))


def forget(request: ForgetRequest, library: Library, likely: list[int] | None = None, kept: Callable[[], None] | None = None,
           person: Person | None = None) -> Forgetting:
    """The request's person forgotten for good in `library` (`forget_person`); PersonNotFound when nobody is that person.
    `person`: the request's person found already (`person_to_forget`: the CLI shows them before it asks)."""
    found = person if person is not None else person_to_forget(library, request.person)
    return forget_person(library, found, keep_name=request.keep_name, also=tuple(request.also), likely=likely, kept=kept)

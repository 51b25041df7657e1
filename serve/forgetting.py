"""The web app's "forget" (the person page's button, POST /people/ID/forget and its /api twin): the person leaves the
library as `headsearch people forget` takes them out (the same note names the inbox tracks likely theirs, which stay),
and every copy the app keeps goes with them: the last searches and their photos (a kept search's export, /exports/KEY.*,
lists their moments), and every job (a redaction's audit trail lists each head's boxes, an "everyone but" video shows
them); a job still running when they are forgotten ends without its files. Then the library folder and the app's
cache folder are searched for what is left of them (`headsearch.store.leftovers`), the outcome in the answer."""
from __future__ import annotations

from typing import Protocol

from actions.forget import forget
from actions.requests import ForgetRequest
from headsearch.people.forgetting import likely_line, likely_theirs, person_to_forget
from headsearch.store.library import Library


class Site(Protocol):
    """What forgetting needs of `serve.views.Site` (which calls it: no import back, no circle)."""

    library: Library
    cache: object  # serve.media.MediaCache: its `folder` is searched too

    def forget_kept(self) -> None: ...


def forget_everywhere(site: Site, person_id: int, confirm: str, not_confirmed: type[Exception]) -> dict:
    """Forget a person once `confirm` is their label (`not_confirmed` raised otherwise); the answer: the record kept,
    the note about the inbox tracks likely theirs (None when there are none), the search's line."""
    person = person_to_forget(site.library, person_id)
    if " ".join(str(confirm).split()).casefold() != person.label().casefold():
        raise not_confirmed(f"type {person.label()!r} to forget this person: nothing was forgotten")
    request = ForgetRequest(person.id, also=(site.cache.folder,))  # the app's cache is searched too, as `people forget --verify`'s
    return forget(request, site.library, kept=site.forget_kept, person=person).to_dict()  # as `people forget --json`


def likely_note(site: Site, person) -> str | None:
    """The person page's warning before a forget: the inbox tracks likely theirs, which are not forgotten with them."""
    waiting = likely_theirs(site.library, person)
    return likely_line(waiting, person.id).removeprefix("note: ") if waiting else None

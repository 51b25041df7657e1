"""What a user asks of compare, cast, redact and forget: one frozen record each, what to do and with what. The CLI
builds one from its options, the web app from its form (bench from its set), and hands it to the one action of its
kind (`actions.compare.compare` and `cast`, `actions.redact.redact`, `actions.forget.forget`), whose result's
`to_dict()` (compare's and cast's: `to_json()`, the list `--json` prints, an entry per video) is what the CLI's
`--json` prints and the web app's JSON answers. Nothing here runs anything."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from actions.redact_output import DEFAULT_MARGIN
from headsearch.basics.errors import HeadsearchError
from headsearch.basics.media import media_kind
from headsearch.basics.settings import IndexSettings
from schemas.records import MediaKind, RedactStyle

if TYPE_CHECKING:
    from headsearch.compare.spec import CompareSpec


@dataclass(frozen=True)
class ReferenceSpec:
    """One reference person as the user gave it: photos (files or folders), clips (their main person) and persons of a
    library, all of one person, under one name (default: the first source's)."""

    name: str | None = None
    photos: tuple[Path, ...] = ()
    videos: tuple[Path, ...] = ()
    persons: tuple[str | int, ...] = ()
    # How each photo is named where its path is not its name (an upload, as the user named it): the photos are then
    # taken as they are (not as folders), and the reference is named and sourced by these.
    labels: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.photos or self.videos or self.persons)


@dataclass(frozen=True)
class CompareRequest:
    """A comparison (`headsearch compare`, the web's Compare page) or a cast (`compare --cast`, the web's cast over
    the library's named people): the videos, and the people to look for in them; with a library, its model, bars and
    persons. A `spec` (`--spec FILE`) decides the model, the bars, the sample rate and every setting below it."""

    videos: tuple[Path, ...] = ()  # videos, or folders of them (recursively)
    references: tuple[ReferenceSpec, ...] = ()  # the reference people; for a cast, its characters
    library: Path | None = None
    model: str | None = None  # default: the library's, else the default model
    fps: float | None = None  # frames sampled a second (None: the indexer's)
    every_frame: bool = False
    min_segment: float = 1.0  # seconds: a shorter run of one tier joins its neighbour
    chunk_frames: int | None = None  # clips generated in chunks of this many frames: their seams scored
    chunk_overlap: int = 0
    ref_head: int | None = None  # in reference photos of several heads, this one (1, 2, ...; 0: the largest)
    whole_image: bool = False  # reference photos are head crops
    spec: CompareSpec | None = None


@dataclass(frozen=True)
class Whom:
    """Whose heads are hidden: one person (`person`: a person of the library, by name or id; or `photos`: reference
    photos of one person), everyone but some people (`spare`: each a person of the library or a photo of one), or
    `everyone`."""

    person: str | None = None
    photos: tuple[Path, ...] = ()
    spare: tuple[str, ...] = ()
    everyone: bool = False
    whole_image: bool = False  # each photo is the head crop (the back of a head too), as `query --whole-image` takes it

    def __post_init__(self) -> None:
        chosen = sum((self.person is not None, bool(self.photos), bool(self.spare), self.everyone))
        if chosen != 1:
            raise HeadsearchError("say whom to redact: a person (--person NAME or --ref PHOTO), everyone but some people "
                                  "(--all-except NAME|PHOTO), or --everyone" if chosen == 0 else
                                  "--person, --ref, --all-except and --everyone exclude each other: give one")

    @property
    def needs_library(self) -> bool:
        return self.person is not None or any(not is_photo(s) for s in self.spare)

    def to_dict(self) -> dict:
        if self.everyone:
            return {"everyone": True}
        if self.spare:
            return {"all_except": list(self.spare)}
        if self.person is not None:
            return {"person": self.person}
        return {"photos": [str(p) for p in self.photos], **({"whole_image": True} if self.whole_image else {})}


def is_photo(value: str | Path) -> bool:
    """An --all-except value names a photo (a file there, or a photo's name) rather than a person of the library."""
    return Path(value).is_file() or media_kind(value) == MediaKind.IMAGE


@dataclass(frozen=True)
class RedactRequest:
    """A redaction (`headsearch redact`, the web's redaction job): `whom`'s heads hidden in every frame of `video`,
    written to `out` with its audit trail (and a contact sheet into the folder `preview`). Refused unless asked for: an
    output there already (`force`), a person to hide whom no track matches (`allow_none`); `verify`: the output is
    looked at again."""

    video: Path
    out: Path
    whom: Whom
    style: RedactStyle | str = RedactStyle.BLUR
    margin: float = DEFAULT_MARGIN
    preview: Path | None = None
    library: Path | None = None  # its people, and its analysis of the video where it holds it unchanged
    model: str | None = None
    force: bool = False
    allow_none: bool = False
    verify: bool = False
    settings: IndexSettings | None = None  # the analysis' (default: from the environment)


@dataclass(frozen=True)
class ForgetRequest:
    """A person forgotten for good (`headsearch people forget`, the web's forget): `person` by name or id; `keep_name`
    keeps their name in the library's record of it; `also`: folders searched for what is left of them besides the
    library's (the web app's cache)."""

    person: str | int
    keep_name: bool = False
    also: tuple[Path, ...] = ()

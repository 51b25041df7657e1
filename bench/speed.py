"""Speed benchmarks in one run: indexing one video (`bench.indexing`), searching synthetic vectors
(`bench.search`, `bench.ondisk`), and a cold query of a one-video library (`bench.cold_query`)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.search import IN_MEMORY, SearchPlan, SearchSpeed
from headsearch.basics.settings import IndexSettings

Report = Callable[[str], None]


@dataclass(frozen=True)
class SpeedOptions:
    """What one speed benchmark measures."""

    video: Path | None = None  # the video indexed for the indexing benchmark (None: no indexing benchmark)
    search: SearchPlan | None = field(default_factory=SearchPlan)  # the search benchmark (None: none)
    model: str | None = None  # the model that indexes (None: the default model)
    settings: IndexSettings = field(default_factory=IndexSettings)  # sampling, decoding, detection
    repeat: int = 1  # indexing runs, each followed by its own decode-only run (the record is the median run's); cold queries
    query_photo: Path | None = None  # the photo of the cold-query benchmark, on a library of `video` (None: no such benchmark)
    index_video: bool = True  # the indexing benchmark runs on `video`


@dataclass
class SpeedRun:
    """The results of one speed benchmark: the indexing record and/or each index at each size."""

    options: SpeedOptions
    indexing: dict | None = None  # `bench.indexing.indexing_speed`'s record (None: not measured)
    search: list[SearchSpeed] | None = None  # one result per index and size (None: not measured)
    cold_query: dict | None = None  # `bench.cold_query.cold_query_speed`'s record (None: not measured)

    def to_dict(self) -> dict:
        """{"indexing": {...}, "search": [...]}, with only the parts that ran."""
        out: dict = {}
        if self.indexing is not None:
            out["indexing"] = self.indexing
        if self.search is not None:
            out["search"] = [r.to_dict() for r in self.search]
        if self.cold_query is not None:
            out["cold_query"] = self.cold_query
        return out


def bench_speed(options: SpeedOptions, report: Report = print, progress: Report | None = None) -> SpeedRun:
    """Run the speed benchmarks the options ask for; warnings go to `report`, progress (and the on-disk
    benchmark's progress bars) to `progress` when given."""
    say = progress or (lambda m: None)
    run = SpeedRun(options)
    if options.video is not None and options.index_video:
        from bench.indexing import indexing_speed

        say(f"indexing {options.video} into a temporary library" + (f", {options.repeat} times" if options.repeat > 1 else ""))
        run.indexing = indexing_speed(options.video, options.model, options.settings, options.repeat)
        for w in run.indexing["warnings"]:
            report(f"warning: {w}")
    if options.search is not None:
        run.search = search_results(options.search, progress)
    if options.video is not None and options.query_photo is not None:
        from bench.cold_query import cold_query_speed

        say(f"cold query: {options.video} indexed into a temporary library, then {options.repeat} fresh `query` processes")
        run.cold_query = cold_query_speed(options.video, options.query_photo, options.model, repeat=options.repeat)
    return run


def search_results(plan: SearchPlan, progress: Report | None = None) -> list[SearchSpeed]:
    """Each index of the plan at each of its sizes, smallest first; a size that would not fit in memory is refused."""
    from bench.ondisk import library_search_speed, ondisk_search_speed
    from bench.search import check_memory, search_speed

    say = progress or (lambda m: None)
    in_memory = tuple(i for i in plan.indexes if i in IN_MEMORY)
    results: list[SearchSpeed] = []
    for n in plan.sizes:
        if in_memory:
            check_memory(n, plan.dim, in_memory)
            say(f"search: {n:,} vectors ({', '.join(in_memory)})")
            results.extend(search_speed(n, plan))
        if "ivfpq-ondisk" in plan.indexes:
            say(f"search: {n:,} vectors (ivfpq-ondisk)")
            results.extend(ondisk_search_speed(n, plan, progress))
        if "library" in plan.indexes:
            say(f"search: {n:,} vectors (library: the library's store in on-disk segments)")
            results.extend(library_search_speed(n, plan, progress))
    return results

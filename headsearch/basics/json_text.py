"""JSON text of what headsearch reports, numpy's numbers and arrays and paths included: the one encoder of every
`--json`, the web app's answers and the JSON files it writes. Scores, boxes and times come out of numpy as float32 and
int64 scalars here and there (a 5-frame clip's head box, a batch's score), which `json` alone refuses."""
from __future__ import annotations

import json
from pathlib import PurePath


def plain(value: object) -> object:
    """A JSON value for what `json` cannot encode by itself (its `default`): numpy scalars as numbers, arrays as lists,
    paths as text; anything else is refused as `json` refuses it."""
    import numpy as np  # here: a command that prints plain JSON does not load numpy for it

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, PurePath):
        return str(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def json_text(data: object, indent: int | None = 2, **options) -> str:
    """`data` as JSON text, numpy values and paths included (`plain`)."""
    return json.dumps(data, indent=indent, default=plain, **options)

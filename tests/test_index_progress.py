"""`index --progress` names the file being read, not the one just finished (issue 52, item 9)."""
from __future__ import annotations

import re

from conftest import made_photo, run


def test_the_progress_line_names_the_file_being_read(tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    names = [made_photo(folder / f"{name}.png", seed).name for seed, name in enumerate(("first", "second", "third"))]
    said = run("index", folder, "--library", tmp_path / "lib", "--model", "fake-pixels", "--progress")
    # Every state the bar drew, as (files done, the file it names); tqdm redraws on \r.
    states = [(int(m.group(1)), m.group(2)) for m in re.finditer(r"files:.*?\| (\d)/3 \[[^\]]*?, ([\w.]+)\]", said.stderr.replace("\r", "\n"))]
    assert states, said.stderr
    # While n files are done, the one named is the (n+1)-th being read (or, at the end, the last one read).
    assert all(name == names[min(done, 2)] for done, name in states if done < 3), states
    assert (0, names[0]) in states, states  # the first file is named while it is read, before it is done

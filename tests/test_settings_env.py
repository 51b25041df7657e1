"""Settings and limits from the environment: what is no finite number is one line, whatever the command (issue 44:
HEADSEARCH_MAX_IMAGE_PIXELS=inf gave "unexpected error (OverflowError)")."""
from __future__ import annotations

import pytest
from click.testing import CliRunner
from fake_model import FAKE_MODEL

from cli.main import main
from headsearch.basics.errors import HeadsearchError
from headsearch.basics.settings import IndexSettings, MediaLimits


@pytest.mark.parametrize("raw", ["inf", "-inf", "nan", "1e999", "lots"])
def test_a_setting_that_is_no_finite_number_is_one_line(monkeypatch, raw):
    monkeypatch.setenv("HEADSEARCH_MAX_IMAGE_PIXELS", raw)
    with pytest.raises(HeadsearchError, match="HEADSEARCH_MAX_IMAGE_PIXELS: a finite number is expected"):
        MediaLimits.from_env()
    monkeypatch.delenv("HEADSEARCH_MAX_IMAGE_PIXELS")
    monkeypatch.setenv("HEADSEARCH_SAMPLE_FPS", raw)
    with pytest.raises(HeadsearchError, match="HEADSEARCH_SAMPLE_FPS: a finite number is expected"):
        IndexSettings.from_env()


def test_the_cli_says_it_in_one_line(tmp_path):
    photo = tmp_path / "photo.png"
    photo.write_bytes(b"not a photo")
    result = CliRunner().invoke(main, ["index", str(photo), "--library", str(tmp_path / "library"), "--model", FAKE_MODEL],
                                env={"HEADSEARCH_MAX_IMAGE_PIXELS": "inf"})
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "HEADSEARCH_MAX_IMAGE_PIXELS: a finite number is expected, got 'inf'" in result.output

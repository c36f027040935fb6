"""launch() and the errors, second look of review 10: arguments that name nothing, and errors rebuilt from
themselves. Real processes and FIFOs where a player is involved; nothing may be left behind (``no_leaks``)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import renderd
from renderd.errors import ConfigError
from renderd.process import player_argv

from .conftest import START, peer_argv


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize("log_path", ["", b""])
def test_an_empty_log_path_is_a_config_error_naming_it(tmp_path, monkeypatch, log_path):
    # An empty log_path (a setting read from an unset variable) was made absolute as the working directory,
    # and the launch failed with "cannot open the player's log file (/the/cwd): Is a directory", a RenderdError
    # naming a path the caller never gave, and no argument.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        renderd.launch(peer_argv(), platform="headless", log_path=log_path, start_timeout=START)
    assert info.value.key == "log_path"
    assert "empty" in str(info.value) and str(tmp_path) not in str(info.value)


@pytest.mark.parametrize("quality", [np.int64(3), np.uint8(3)])
def test_a_numpy_quality_number_is_taken_as_its_number(quality):
    # The quality is a name or its number; a numpy integer (a sweep over np.arange(1, 8)) was refused as
    # "unknown quality np.int64(3); expected one of Very Low, Low, ...", as if 3 were not a quality number,
    # though width, height, pipe_size and the arguments all take numpy integers.
    argv = player_argv([sys.executable], width=32, height=24, quality=quality, extra_args=[], log_path=None)
    assert argv[argv.index("-screen-quality") + 1] == "3"


@pytest.mark.parametrize("quality", [np.int64(9), ["Ultra"], 7.0])
def test_a_quality_that_is_no_level_is_a_config_error(quality):
    # A list was a bare TypeError (unhashable type: 'list') out of the table lookup, naming no argument.
    with pytest.raises(ConfigError) as info:
        player_argv([sys.executable], width=32, height=24, quality=quality, extra_args=[], log_path=None)
    assert info.value.key == "quality"

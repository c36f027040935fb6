"""launch() and the errors, second look of review 10: arguments that name nothing, and errors rebuilt from
themselves. Real processes and FIFOs where a player is involved; nothing may be left behind (``no_leaks``)."""

from __future__ import annotations

import pickle

import pytest

import renderd
from renderd.errors import ConfigError

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

"""renderd.connect's signature says what it takes, as help() shows it."""

from __future__ import annotations

import inspect

import pytest

import renderd


def test_connect_names_its_parameters():
    params = inspect.signature(renderd.connect).parameters
    assert "step_timeout" in params, list(params)
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()), list(params)


def test_a_misspelt_keyword_fails_before_the_daemon_is_asked(tmp_path):
    with pytest.raises(TypeError, match="step_timout"):
        renderd.connect("demo", socket=str(tmp_path / "no-daemon.sock"), step_timout=5)

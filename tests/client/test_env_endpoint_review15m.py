"""A player's explicit ``env`` may not set its endpoint (the ``AI2THOR_*`` variables renderd sets for each
player): ``launch`` and a configuration refuse it up front, naming the variable, before anything starts."""

from __future__ import annotations

import pytest

import renderd
from renderd.config import loads
from renderd.errors import ConfigError
from renderd.process import ENDPOINT_VARIABLES

from tests.client.conftest import live_children


@pytest.mark.parametrize("name", ENDPOINT_VARIABLES)
def test_launch_refuses_an_endpoint_variable_in_env_before_starting_anything(tmp_path, name):
    marker = tmp_path / "started"
    script = tmp_path / "player"
    # A build that waits on whatever pipe it is told, as a real one does: without the check, launch() waits
    # for its first frame until start_timeout.
    script.write_text(f"#!/bin/sh\ntouch {marker}\nexec sleep 30\n")
    script.chmod(0o755)
    with pytest.raises(ConfigError) as info:
        renderd.launch([str(script)], platform="headless", env={"HOME": "/tmp", name: "/elsewhere"},
                       start_timeout=5)
    assert info.value.key == "env"
    message = str(info.value)
    assert name in message and "renderd sets for each player" in message, message
    assert not marker.exists(), "the player was started"
    assert not live_children()


@pytest.mark.parametrize("name", ENDPOINT_VARIABLES)
def test_a_configuration_refuses_an_endpoint_variable_in_env(name):
    with pytest.raises(ConfigError) as info:
        loads(f'[environments.demo]\nenv = {{{name} = "1"}}\n', path="c.toml", resolve=False)
    assert info.value.key == "environments.demo.env" and info.value.path == "c.toml"
    assert name in info.value.reason and "renderd sets for each player" in info.value.reason


def test_other_ai2thor_variables_stay_allowed():
    # Not an endpoint: a build reads it as a setting, and a user may override renderd's choice of it.
    config = loads('[environments.demo]\nenv = {AI2THOR_SERVER_SIDE_SCREENSHOT = "False"}\n', resolve=False)
    assert config.environments["demo"].env == {"AI2THOR_SERVER_SIDE_SCREENSHOT": "False"}

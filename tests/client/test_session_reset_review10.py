"""Session.reset to a scene the player does not have fails, instead of carrying on in the old scene."""

from __future__ import annotations

import pytest

import renderd

from tests.client.conftest import START

SMALL = dict(width=64, height=48)


def test_a_reset_to_a_scene_the_player_lacks_raises_and_changes_nothing():
    # The player refuses the Reset; reset() used to send Initialize anyway and return its successful
    # event, so a misspelt scene name went on in the old scene with no sign of failure.
    with renderd.launch(**SMALL, start_timeout=START, step_timeout=10) as session:
        session.reset("FloorPlan2", gridSize=0.5)
        with pytest.raises(ValueError, match="FloorPlan999.*no scene named"):
            session.reset("FloorPlan999", gridSize=0.75)
        assert session.last_event.metadata["lastAction"] == "Reset" and not session.last_event
        assert session._init_params == {"gridSize": 0.5}  # the refused reset's parameters are not kept
        event = session.reset()  # usable: the old scene, the old parameters
        assert event and event.metadata["sceneName"] == "FloorPlan2"

"""A MoveAhead whose moveMagnitude is over the player's limit fails as InvalidArgument, saying the limit
(the range message was built with a bound that is None: an internal TypeError)."""

from __future__ import annotations

from renderd.player.core import Player


def test_a_move_over_the_limit_is_an_invalid_argument():
    player = Player(width=32, height=32, platform="Linux64")
    metadata, _ = player.handle({"action": "MoveAhead", "moveMagnitude": 101})
    agent = metadata["agents"][0] if "agents" in metadata else metadata
    assert agent["lastActionSuccess"] is False
    assert agent["errorCode"] == "InvalidArgument", agent["errorMessage"]
    assert "moveMagnitude must be at most 100, got 101" in agent["errorMessage"], agent["errorMessage"]
    metadata, _ = player.handle({"action": "MoveAhead", "moveMagnitude": 100})
    agent = metadata["agents"][0] if "agents" in metadata else metadata
    assert agent["errorCode"] != "InvalidArgument", agent["errorMessage"]

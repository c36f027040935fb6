"""A RenderdFault naming a parameter it does not take: the refusal says why, without claiming a build's behaviour
for an action only this player has."""

from __future__ import annotations

from renderd.player.core import Player
from renderd.player.renderer import make_renderer


def _failure(action: dict) -> dict:
    player = Player(width=16, height=16, renderer=make_renderer("numpy"), static_frame=True)
    metadata, _images = player.handle(action)
    return metadata["agents"][0]


def test_a_misspelt_fault_parameter_is_refused_as_this_players_own_action():
    agent = _failure({"action": "RenderdFault", "fault": "sleep", "secs": 0.1, "sequenceId": 1})
    assert agent["lastActionSuccess"] is False and agent["errorCode"] == "InvalidArgument"
    message = agent["errorMessage"]
    assert "'secs'" in message and "a build" not in message, message
    assert "would run the fault with its default" in message, message


def test_an_argument_a_builds_action_does_not_take_still_says_a_build_refuses_it():
    agent = _failure({"action": "MoveAhead", "bogus": 1, "sequenceId": 1})
    assert agent["errorCode"] == "InvalidArgument" and "(a build refuses it too)" in agent["errorMessage"]

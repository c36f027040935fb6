"""Crouch and Stand, as an AI2-THOR 5.x build's physics agent has them (they were not actions of the player).

A build's ``Crouch()`` lowers the camera to the agent's position (0.675 m lower; ``isStanding`` false) and ``Stand()``
puts it back; crouching when crouching fails with ``errorMessage`` ``Already crouching.`` (standing: ``Already
standing.``), ``errorCode`` null, nothing changed. Both take no argument. A teleport's ``standing`` false crouches the
agent the same way, and ``Stand`` stands it up.
"""

from __future__ import annotations

import pytest

from renderd.player.core import ACTION_ARGUMENTS, Player


def _agent(md: dict, i: int = 0) -> dict:
    return md["agents"][i]


def _run(p: Player, action: dict) -> dict:
    return _agent(p.handle(action)[0], p.active)


def test_crouch_lowers_the_camera_and_stand_raises_it_as_a_build():
    p = Player(width=16, height=12)
    standing = _run(p, {"action": "Pass"})
    agent = _run(p, {"action": "Crouch"})
    assert agent["lastActionSuccess"] is True and agent["errorCode"] is None and agent["errorMessage"] == ""
    assert agent["agent"]["isStanding"] is False
    assert agent["cameraPosition"]["y"] == pytest.approx(standing["cameraPosition"]["y"] - 0.675)
    assert agent["cameraPosition"]["y"] == agent["agent"]["position"]["y"]
    assert agent["agent"]["position"] == standing["agent"]["position"]
    agent = _run(p, {"action": "Stand"})
    assert agent["lastActionSuccess"] is True and agent["agent"]["isStanding"] is True
    assert agent["cameraPosition"] == standing["cameraPosition"]


def test_crouching_twice_or_standing_while_standing_fails_with_a_builds_message():
    p = Player(width=16, height=12)
    agent = _run(p, {"action": "Stand"})
    assert agent["lastActionSuccess"] is False and agent["errorCode"] is None
    assert agent["errorMessage"] == "Already standing." and agent["agent"]["isStanding"] is True
    assert _run(p, {"action": "Crouch"})["lastActionSuccess"]
    agent = _run(p, {"action": "Crouch"})
    assert agent["lastActionSuccess"] is False and agent["errorCode"] is None
    assert agent["errorMessage"] == "Already crouching." and agent["agent"]["isStanding"] is False


def test_a_teleports_crouch_is_the_same_crouch():
    p = Player(width=16, height=12)
    assert _run(p, {"action": "Teleport", "standing": False})["agent"]["isStanding"] is False
    assert _run(p, {"action": "Crouch"})["errorMessage"] == "Already crouching."
    assert _run(p, {"action": "Stand"})["agent"]["isStanding"] is True
    assert _run(p, {"action": "Crouch"})["lastActionSuccess"]
    assert _run(p, {"action": "Teleport", "standing": True})["agent"]["isStanding"] is True


def test_each_agent_crouches_on_its_own_and_crouch_takes_no_argument():
    p = Player(width=16, height=12)
    assert _run(p, {"action": "Initialize", "agentCount": 2})["lastActionSuccess"]
    md, _ = p.handle({"action": "Crouch", "agentId": 1})
    assert _agent(md, 1)["agent"]["isStanding"] is False and _agent(md, 0)["agent"]["isStanding"] is True
    # A build's Crouch() and Stand() have no parameter: an argument is refused (InvalidArgument), nothing changes.
    assert ACTION_ARGUMENTS["Crouch"] == ACTION_ARGUMENTS["Stand"] == ((),)
    agent = _run(p, {"action": "Stand", "degrees": 30})
    assert agent["errorCode"] == "InvalidArgument" and agent["agent"]["isStanding"] is True

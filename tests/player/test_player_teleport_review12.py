"""Teleport's ``forceAction``, as a build's physics agent takes it: the horizon is not held to the look limits and
the spot is not checked for collisions (walls, boxes, other agents)."""

from __future__ import annotations

import pytest

from renderd.player.core import Player
from renderd.protocol import FieldType


def _agent(md: dict, i: int = 0) -> dict:
    return md["agents"][i]


@pytest.mark.parametrize("name", ["Teleport", "TeleportFull"])
def test_force_action_takes_a_horizon_past_the_look_limits(name):
    p = Player(width=16, height=12)
    for horizon in (75, -60, 90, -90):
        md, images = p.handle({"action": name, "position": {"x": 0, "y": 0.9, "z": -2}, "rotation": {"y": 0},
                               "horizon": horizon, "standing": True, "forceAction": True})
        assert _agent(md)["lastActionSuccess"], _agent(md)["errorMessage"]
        assert _agent(md)["agent"]["cameraHorizon"] == horizon and p.horizon == horizon
        assert [kind for kind, _ in images] == [FieldType.RGB_IMAGE]
    # Without it (or with false) the limits hold, as before: a failure with no errorCode, nothing changed.
    for force in (False, "false", 0, None):
        md, _ = p.handle({"action": name, "position": {"x": 0.5, "y": 0.9, "z": -2}, "rotation": {"y": 90},
                          "horizon": 75, "standing": True, "forceAction": force})
        assert not _agent(md)["lastActionSuccess"] and _agent(md)["errorCode"] is None
        assert (p.x, p.yaw, p.horizon) == (0, 0, -90)


def test_a_look_from_a_forced_horizon_is_checked_against_the_limits():
    p = Player(width=16, height=12)
    assert _agent(p.handle({"action": "Teleport", "horizon": 80, "forceAction": True})[0])["lastActionSuccess"]
    md, _ = p.handle({"action": "LookDown"})
    assert not _agent(md)["lastActionSuccess"] and _agent(md)["errorCode"] == "LookDownCantExceedMin"
    md, _ = p.handle({"action": "LookUp"})
    assert _agent(md)["lastActionSuccess"] and p.horizon == 50


def test_force_action_skips_the_collision_check():
    p = Player(width=16, height=12)
    # FloorPlan1's Fridge: a 1 m box centred 3 m ahead of the start, at (0, 1).
    md, _ = p.handle({"action": "Teleport", "position": {"x": 0, "y": 0.9, "z": 1.0}})
    assert not _agent(md)["lastActionSuccess"] and "Fridge" in _agent(md)["errorMessage"]
    md, _ = p.handle({"action": "Teleport", "position": {"x": 0, "y": 0.9, "z": 1.0}, "forceAction": True})
    assert _agent(md)["lastActionSuccess"], _agent(md)["errorMessage"]
    assert (p.x, p.z) == (0, 1)
    # Outside the room, and onto another agent.
    md, _ = p.handle({"action": "TeleportFull", "position": {"x": 0, "y": 0.9, "z": -5}, "rotation": {"y": 0},
                      "horizon": 0, "standing": True, "forceAction": "true"})
    assert _agent(md)["lastActionSuccess"], _agent(md)["errorMessage"]
    assert _agent(md)["agent"]["position"]["z"] == -5
    p = Player(width=16, height=12)
    md, _ = p.handle({"action": "Initialize", "agentCount": 2})
    other = p.agents[1]
    spot = {"x": other.x, "y": 0.9, "z": other.z}
    # A build's teleport checks the scene's objects, not the other agents: onto another agent's spot is carried out.
    md, _ = p.handle({"action": "Teleport", "position": spot})
    assert _agent(md)["lastActionSuccess"] and (p.x, p.z) == (other.x, other.z)


def test_what_force_action_cannot_take_is_refused():
    # The player's own limits: a horizon past straight up or down (a build's camera turns over there) and a spot
    # more than 100 m from the room's centre.
    p = Player(width=16, height=12)
    for arguments in ({"horizon": 90.5}, {"horizon": -135}, {"position": {"x": 101, "y": 0.9, "z": 0}},
                      {"position": {"x": 0, "y": 0.9, "z": -1e300}}):
        md, _ = p.handle({"action": "Teleport", "forceAction": True, **arguments})
        assert not _agent(md)["lastActionSuccess"] and _agent(md)["errorCode"] == "InvalidArgument", arguments
        assert (p.x, p.z, p.horizon) == (0, -2, 0)

"""A blocked move's errorMessage, worded as an AI2-THOR 5.x build's physics agent words it (its CheckIfAgentCanMove):
``<what blocks> is blocking Agent <n> from moving by (<x>, <y>, <z>).``, the offset the move's own vector in world
coordinates (x, y, z), each with 4 decimals (C#'s ``F4``). A box or wall is named by its GameObject name (a box's is its
metadata ``name``, ``Fridge_1``; a wall's ``WallSouth``...), another agent as ``Agent <m>``. Agents and tools parse
this text; the player's own wording (``MoveAhead is blocked: the agent would collide with ...``) matched nothing.
"""

from __future__ import annotations

import re

from renderd.player.core import Player

BUILD = re.compile(r"^(?P<what>.+) is blocking Agent (?P<agent>\d+) from moving by "
                   r"\((?P<x>-?\d+\.\d{4}), (?P<y>-?\d+\.\d{4}), (?P<z>-?\d+\.\d{4})\)\.$")


def _run(p: Player, action: dict) -> dict:
    md, _ = p.handle(action)
    return md["agents"][p.active]


def test_a_box_blocking_a_move_is_named_as_in_the_metadata_and_the_offset_is_the_moves():
    p = Player(width=16, height=12)
    agent = _run(p, {"action": "MoveAhead", "moveMagnitude": 3})  # the fridge is 2.5 m ahead
    assert agent["lastActionSuccess"] is False and agent["errorCode"] is None
    fridge = next(o for o in agent["objects"] if o["objectType"] == "Fridge")
    assert agent["errorMessage"] == f"{fridge['name']} is blocking Agent 0 from moving by (0.0000, 0.0000, 3.0000)."
    assert fridge["name"] == "Fridge_1" and BUILD.match(agent["errorMessage"])


def test_the_offset_is_in_world_coordinates_whatever_the_agents_yaw():
    p = Player(width=16, height=12)
    assert _run(p, {"action": "RotateRight"})["lastActionSuccess"]  # yaw 90: ahead is +x
    agent = _run(p, {"action": "MoveAhead", "moveMagnitude": 3.5})  # the shelf by the east wall is in the way
    assert agent["errorMessage"] == "Shelf_4 is blocking Agent 0 from moving by (3.5000, 0.0000, 0.0000)."
    agent = _run(p, {"action": "MoveRight", "moveMagnitude": 1.25})  # yaw 90: right is -z; the south wall 1 m away
    assert agent["errorMessage"] == "WallSouth is blocking Agent 0 from moving by (0.0000, 0.0000, -1.2500)."
    assert (p.x, p.z) == (0, -2)


def test_another_agent_blocking_a_move_is_named_agent_n_as_a_build_names_it():
    p = Player(width=16, height=12)
    assert _run(p, {"action": "Initialize", "agentCount": 2})["lastActionSuccess"]  # agent 1 at (1, -2)
    agent = _run(p, {"action": "MoveRight", "moveMagnitude": 0.75})
    assert agent["errorMessage"] == "Agent 1 is blocking Agent 0 from moving by (0.7500, 0.0000, 0.0000)."
    agent = _run(p, {"action": "MoveLeft", "moveMagnitude": 0.75, "agentId": 1})
    assert agent["errorMessage"] == "Agent 0 is blocking Agent 1 from moving by (-0.7500, 0.0000, 0.0000)."
    m = BUILD.match(agent["errorMessage"])
    assert m and (m["what"], m["agent"]) == ("Agent 0", "1")

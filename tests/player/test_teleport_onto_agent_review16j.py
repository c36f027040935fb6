"""A teleport onto the spot where another agent stands is carried out, as a build's (whose check looks at the scene's
objects only, not the agents): docs/player.md, Agents."""

from __future__ import annotations

from renderd.player.core import Player


def _player() -> Player:
    return Player(width=16, height=12, platform="Linux64", headless=True)


def _step(p: Player, action: dict) -> dict:
    md, _ = p.handle(action)
    return md["agents"][0]


def test_a_teleport_onto_another_agents_spot_is_carried_out_as_in_a_build():
    p = _player()
    md, _ = p.handle({"action": "Initialize", "agentCount": 2})
    other = p.agents[1]
    spot = {"x": other.x, "y": 0.9, "z": other.z}
    onto = _step(p, {"action": "Teleport", "position": spot})
    assert onto["lastActionSuccess"], onto["errorMessage"]
    assert (p.agents[0].x, p.agents[0].z) == (other.x, other.z)
    # A box is still refused (a build's check looks at the scene's objects).
    boxed = _step(p, {"action": "Teleport", "position": {"x": 0, "y": 0.9, "z": 1.0}})
    assert not boxed["lastActionSuccess"] and "Collided with: Fridge" in boxed["errorMessage"]


def test_a_real_player_lets_a_teleport_land_where_another_agent_stands(spawn):
    p = spawn(["-screen-width", "32", "-screen-height", "24"])
    p.start_session()
    assert p.step("Initialize", agentCount=2).metadata["lastActionSuccess"]
    spot = {"x": 1.0, "y": 0.9, "z": -2.0}  # agent 1's spot in FloorPlan1 (docs/player.md, Agents)
    onto = p.step("Teleport", position=spot, agentId=0)
    assert onto.metadata["lastActionSuccess"], onto.metadata["errorMessage"]
    assert onto.metadata["agent"]["position"] == spot

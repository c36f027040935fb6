"""The reference player's most used actions against an AI2-THOR 5.x build's physics (default) agent.

* TeleportFull's ``standing`` is a bool parameter with no default: without it the build's ActionDispatcher fails the
  action ``MissingArguments`` (every missing parameter named, in the overload's order), and null cannot be converted
  to a bool (``InvalidArgument``); Teleport's is optional. Arguments given are converted before missing ones are named.
  ``standing`` false crouches the agent (its camera lower, ``isStanding`` false).
* Teleport fails a spot off the grid (with ``snapToGrid``), a pitch or roll, and a ``y`` off the floor unless forced;
  Initialize puts each agent on the grid.
* With ``snapToGrid`` (an Initialize's, true unless sent false) a move lands on the nearest point of the world's
  ``gridSize`` grid, as the build's ``moveInDirection`` snaps the agent; a loaded scene's agent has it false until an
  Initialize sets it.
* GetReachablePositions steps out from where the acting agent stands; the 5.0.0 build's method takes no ``gridSize``.
"""

from __future__ import annotations

import pytest

from renderd.player.core import Player

SPOT = {"x": 0.0, "y": 0.9, "z": -1.0}


def _agent(md: dict, i: int = 0) -> dict:
    return md["agents"][i]


def _run(p: Player, action: dict) -> dict:
    return _agent(p.handle(action)[0])


# -- TeleportFull's standing ------------------------------------------------------------------------------------------
def test_teleport_full_without_standing_fails_missing_arguments_as_a_build_and_changes_nothing():
    p = Player(width=16, height=12)
    agent = _run(p, {"action": "TeleportFull", "position": SPOT, "rotation": {"y": 90}, "horizon": 30})
    assert agent["lastActionSuccess"] is False and agent["errorCode"] == "MissingArguments"
    assert agent["errorMessage"] == "action: TeleportFull is missing the following arguments: standing"
    assert (p.x, p.z, p.yaw, p.horizon) == (0, -2, 0, 0)
    # Every missing parameter, in the overload's order.
    agent = _run(p, {"action": "TeleportFull"})
    assert agent["errorMessage"] == ("action: TeleportFull is missing the following arguments: "
                                     "position,rotation,horizon,standing")
    agent = _run(p, {"action": "TeleportFull", "x": 0.0, "y": 0.9, "z": -1.0, "horizon": 0})
    assert agent["errorCode"] == "MissingArguments"
    assert agent["errorMessage"].startswith("action: TeleportFull is missing the following arguments: "
                                            "rotation,standing")
    # With it (any value a build converts to a bool) the teleport is carried out.
    for standing in (True, False, "true", 1):
        p = Player(width=16, height=12)
        agent = _run(p, {"action": "TeleportFull", "position": SPOT, "rotation": {"y": 90}, "horizon": 30,
                         "standing": standing})
        assert agent["lastActionSuccess"], (standing, agent["errorMessage"])
        assert (p.x, p.z, p.yaw, p.horizon) == (0, -1, 90, 30)
        assert agent["agent"]["isStanding"] is (standing is not False)


@pytest.mark.parametrize("standing", [None, {}, [True], "yes"])
def test_a_standing_that_is_no_bool_fails_invalid_argument(standing):
    p = Player(width=16, height=12)
    agent = _run(p, {"action": "TeleportFull", "position": SPOT, "rotation": {"y": 90}, "horizon": 0,
                     "standing": standing})
    assert agent["lastActionSuccess"] is False and agent["errorCode"] == "InvalidArgument"
    assert agent["errorMessage"].startswith("action: TeleportFull has an invalid argument: standing (==")
    assert (p.x, p.z, p.yaw) == (0, -2, 0)
    # Teleport's standing is a bool?: null is not given, anything else must still be a bool.
    agent = _run(p, {"action": "Teleport", "position": SPOT, "standing": standing})
    if standing is None:
        assert agent["lastActionSuccess"] and (p.x, p.z) == (0, -1)
    else:
        assert agent["errorCode"] == "InvalidArgument" and (p.x, p.z) == (0, -2)


def test_an_argument_that_cannot_be_converted_fails_before_the_missing_ones_are_named():
    p = Player(width=16, height=12)
    # (standing is missing in each: the conversion's failure comes first.) What Json.NET cannot convert (null, an
    # array): InvalidArgument naming the argument.
    for horizon, shown in ((None, ""), ([0], "[0]")):
        agent = _run(p, {"action": "TeleportFull", "position": SPOT, "rotation": {"y": 0}, "horizon": horizon})
        assert agent["errorCode"] == "InvalidArgument" and not agent["lastActionSuccess"]
        assert agent["errorMessage"] == (
            f"action: TeleportFull has an invalid argument: horizon (=={shown}). Cannot convert to: float")
    # A string .NET cannot parse: its FormatException, which a build's agent answers as any exception.
    agent = _run(p, {"action": "TeleportFull", "position": SPOT, "rotation": {"y": 0}, "horizon": "level"})
    assert agent["errorCode"] is None and not agent["lastActionSuccess"]
    assert agent["errorMessage"] == "System.FormatException: Input string was not in a correct format."
    assert (p.x, p.z) == (0, -2)
    # The range checks run only once the arguments are all there: a horizon past the limits and no standing is a
    # missing argument, not the failure of the horizon.
    agent = _run(p, {"action": "TeleportFull", "position": SPOT, "rotation": {"y": 0}, "horizon": 75})
    assert agent["errorCode"] == "MissingArguments"
    agent = _run(p, {"action": "TeleportFull", "position": SPOT, "rotation": {"y": 0}, "horizon": 75, "standing": True})
    assert agent["errorCode"] is None and not agent["lastActionSuccess"] and "horizon" in agent["errorMessage"]


def test_a_player_process_answers_teleport_full_without_standing_as_a_build(spawn):
    p = spawn(["-screen-width", "32", "-screen-height", "24"])
    p.start_session()
    ev = p.step("TeleportFull", position=SPOT, rotation={"x": 0, "y": 270, "z": 0}, horizon=0)
    assert not ev and ev.metadata["errorCode"] == "MissingArguments"  # AI2-THOR's controller raises ValueError
    ev = p.step("TeleportFull", position=SPOT, rotation={"x": 0, "y": 270, "z": 0}, horizon=0, standing=True)
    assert ev, ev.metadata["errorMessage"]
    assert ev.metadata["agent"]["position"] == SPOT and ev.metadata["agent"]["rotation"]["y"] == 270


# -- snapToGrid -------------------------------------------------------------------------------------------------------
def test_with_snap_to_grid_a_move_lands_on_the_grid():
    p = Player(width=16, height=12)
    assert _run(p, {"action": "Initialize"})["lastActionSuccess"]
    agent = _run(p, {"action": "MoveAhead", "moveMagnitude": 0.1})  # snapped back: a success that moves nothing
    assert agent["lastActionSuccess"] and agent["agent"]["position"]["z"] == -2.0
    agent = _run(p, {"action": "MoveAhead", "moveMagnitude": 0.15})
    assert agent["lastActionSuccess"] and (p.x, p.z) == (0, -1.75)
    assert _run(p, {"action": "RotateRight", "degrees": 30})["lastActionSuccess"]
    agent = _run(p, {"action": "MoveAhead"})  # (0.125, -1.5335) -> the nearest grid point
    assert agent["lastActionSuccess"] and (p.x, p.z) == (0, -1.5)
    assert agent["agent"]["position"] == {"x": 0.0, "y": 0.9, "z": -1.5}
    agent = _run(p, {"action": "MoveLeft", "moveMagnitude": 0.3})  # at a yaw of 30: (-0.26, -1.35) -> (-0.25, -1.25)
    assert (p.x, p.z) == (-0.25, -1.25)
    # A coarser grid: Initialize puts the agent on it (the grid point below and behind it), moves snap to its points.
    assert _run(p, {"action": "Initialize", "gridSize": 0.5})["lastActionSuccess"] and (p.x, p.z) == (-0.5, -1.5)
    assert _run(p, {"action": "RotateLeft", "degrees": 30})["lastActionSuccess"] and p.yaw == 0
    # x 0.25, then 0.75: halfway between two points, rounded to the even multiple (Math.Round, as a build's).
    assert _run(p, {"action": "MoveRight", "moveMagnitude": 0.75})["lastActionSuccess"] and (p.x, p.z) == (0, -1.5)
    assert _run(p, {"action": "MoveRight", "moveMagnitude": 0.75})["lastActionSuccess"] and (p.x, p.z) == (1, -1.5)
    # A move that would end in the east wall (x 3) is still blocked: the path is checked to where the move leads.
    blocked = _run(p, {"action": "MoveRight", "moveMagnitude": 1.9})
    assert not blocked["lastActionSuccess"] and blocked["errorMessage"].startswith("WallEast is blocking") and (
        p.x, p.z) == (1, -1.5)


def test_without_snap_to_grid_a_move_goes_where_it_leads():
    p = Player(width=16, height=12)
    # A loaded scene's agent: no Initialize yet, snapToGrid false (a build's agent field before Initialize sets it).
    assert _run(p, {"action": "MoveAhead", "moveMagnitude": 0.1})["lastActionSuccess"] and p.z == -1.9
    # Initialize puts the agent on the grid whatever snapToGrid says (the grid point below and behind it) ...
    assert _run(p, {"action": "Initialize", "snapToGrid": False, "rotateStepDegrees": 30})["lastActionSuccess"]
    assert p.z == -2.0
    # ... and with snapToGrid false moves then go where they lead.
    assert _run(p, {"action": "MoveAhead", "moveMagnitude": 0.1})["lastActionSuccess"] and p.z == -1.9
    assert _run(p, {"action": "RotateRight"})["lastActionSuccess"] and p.yaw == 30
    assert _run(p, {"action": "MoveAhead", "moveMagnitude": 0.2})["lastActionSuccess"] and (p.x, p.z) == (0.1, -1.7268)
    # Reset: the scene's agent again, snapToGrid false until the next Initialize.
    assert _run(p, {"action": "Reset"})["lastActionSuccess"]
    assert _run(p, {"action": "MoveBack", "moveMagnitude": 0.1})["lastActionSuccess"] and p.z == -2.1


@pytest.mark.parametrize("init, snaps", [
    ({"fieldOfView": 200}, False),  # fails before the rotation step: snapToGrid stays the new agent's false
    ({"rotateStepDegrees": 45}, False),  # fails at the rotation step (snapToGrid true): not set
    ({"rotateStepDegrees": 45, "snapToGrid": False}, False),
    ({"gridSize": 7}, True),  # fails after it: set
    ({"snapToGrid": "true"}, True),
])
def test_an_initialize_sets_snap_to_grid_once_its_rotation_step_is_taken(init, snaps):
    p = Player(width=16, height=12)
    p.handle({"action": "Initialize", **init})
    assert _run(p, {"action": "MoveAhead", "moveMagnitude": 0.1})["lastActionSuccess"]
    assert p.z == (-2.0 if snaps else -1.9)


def test_snap_to_grid_holds_for_every_agent():
    p = Player(width=16, height=12)
    assert _run(p, {"action": "Initialize", "agentCount": 2})["lastActionSuccess"]
    start = p.agents[1].x, p.agents[1].z
    md, _ = p.handle({"action": "MoveAhead", "agentId": 1, "moveMagnitude": 0.1})
    assert _agent(md, 1)["lastActionSuccess"] and (p.agents[1].x, p.agents[1].z) == start


# -- GetReachablePositions --------------------------------------------------------------------------------------------
def test_reachable_positions_step_out_from_where_the_agent_stands():
    p = Player(width=16, height=12)
    assert _run(p, {"action": "Initialize", "snapToGrid": False})["lastActionSuccess"]
    assert _run(p, {"action": "MoveAhead", "moveMagnitude": 0.1})["lastActionSuccess"] and p.z == -1.9
    positions = _run(p, {"action": "GetReachablePositions"})["actionReturn"]
    assert {"x": 0.0, "y": 0.9, "z": -1.9} in positions
    assert all(round((pos["z"] + 1.9) / 0.25, 6) % 1 == 0 and round(pos["x"] / 0.25, 6) % 1 == 0
               for pos in positions)
    assert not any(str(v) == "-0.0" for pos in positions for v in pos.values())
    # At the start (on the grid) the points are the grid's, as before.
    p = Player(width=16, height=12)
    positions = _run(p, {"action": "GetReachablePositions"})["actionReturn"]
    assert {"x": 0.0, "y": 0.9, "z": -2.0} in positions and {"x": -0.25, "y": 0.9, "z": -1.75} in positions


def test_reachable_positions_refuse_a_grid_size_as_the_5_0_build_does():
    p = Player(width=16, height=12)
    agent = _run(p, {"action": "GetReachablePositions", "gridSize": 0.5})
    assert agent["errorCode"] == "InvalidArgument" and "'gridSize'" in agent["errorMessage"]
    assert agent["actionReturn"] is None
    # Initialize's gridSize is the way to another grid.
    assert _run(p, {"action": "Initialize", "gridSize": 0.5})["lastActionSuccess"]
    positions = _run(p, {"action": "GetReachablePositions"})["actionReturn"]
    assert all(round(pos["x"] / 0.5, 6) % 1 == 0 and round(pos["z"] / 0.5, 6) % 1 == 0 for pos in positions)


# -- Teleport's checks and Initialize's move onto the grid -------------------------------------------------------
def test_with_snap_to_grid_a_teleport_off_the_grid_fails_and_force_action_takes_it():
    p = Player(width=16, height=12)
    # No Initialize yet: snapToGrid false, any spot.
    assert _run(p, {"action": "Teleport", "position": {"x": 0.1, "y": 0.9, "z": -1.9}})["lastActionSuccess"]
    assert _run(p, {"action": "Initialize"})["lastActionSuccess"] and (p.x, p.z) == (0, -2)
    agent = _run(p, {"action": "Teleport", "position": {"x": 0.1, "y": 0.9, "z": -1.0}})
    assert agent["lastActionSuccess"] is False and agent["errorCode"] is None
    assert "not on the grid" in agent["errorMessage"] and (p.x, p.z) == (0, -2)
    agent = _run(p, {"action": "TeleportFull", "x": 0.5, "y": 0.9, "z": -1.1, "rotation": {"y": 0}, "horizon": 0,
                     "standing": True})
    assert agent["errorCode"] is None and "not on the grid of size 0.25" in agent["errorMessage"]
    assert _run(p, {"action": "Teleport", "position": {"x": 0.5, "y": 0.9, "z": -1.25}})["lastActionSuccess"]
    assert _run(p, {"action": "Teleport", "position": {"x": 0.1, "y": 0.9, "z": -1.0}, "forceAction": True})[
        "lastActionSuccess"] and (p.x, p.z) == (0.1, -1.0)
    # snapToGrid false: any spot.
    assert _run(p, {"action": "Initialize", "snapToGrid": False})["lastActionSuccess"] and (p.x, p.z) == (0, -1.0)
    assert _run(p, {"action": "Teleport", "position": {"x": 0.1, "y": 0.9, "z": -1.3}})["lastActionSuccess"]


def test_a_teleport_that_pitches_rolls_or_leaves_the_floor_fails_unless_forced():
    p = Player(width=16, height=12)
    for action in (
        {"action": "Teleport", "rotation": {"x": 10, "y": 90, "z": 0}},
        {"action": "Teleport", "rotation": {"x": 0, "y": 90, "z": -5}},
        {"action": "Teleport", "position": {"x": 0, "y": 2.0, "z": -1.0}},
        {"action": "TeleportFull", "position": {"x": 0, "y": 0.0, "z": -1.0}, "rotation": {"y": 0}, "horizon": 0,
         "standing": True},
        {"action": "Teleport", "x": 0, "y": 0.8, "z": -1.0},
    ):
        agent = _run(p, action)
        assert agent["lastActionSuccess"] is False and agent["errorCode"] is None, action
        assert (p.x, p.z, p.yaw) == (0, -2, 0), action
        agent = _run(p, {**action, "forceAction": True})
        assert agent["lastActionSuccess"], (action, agent["errorMessage"])
        assert agent["agent"]["rotation"]["x"] == 0 and agent["agent"]["position"]["y"] == 0.9  # yaw only; on the floor
        p = Player(width=16, height=12)
    # Within 0.05 m of where the agent stands, and a rotation of (0, yaw, 0), are taken.
    for y in (0.86, 0.9009982, 0.95):
        p = Player(width=16, height=12)
        assert _run(p, {"action": "Teleport", "position": {"x": 0, "y": y, "z": -1.0},
                        "rotation": {"x": 0.001, "y": 90, "z": 0}})["lastActionSuccess"], y


def test_initialize_puts_each_agent_on_the_grid():
    p = Player(width=16, height=12)
    # FloorPlan1's start (0, -2) is off a 0.3 m grid: the grid point below and behind it is (0, -2.1).
    assert _run(p, {"action": "Initialize", "gridSize": 0.3})["lastActionSuccess"] and (p.x, p.z) == (0, -2.1)
    assert _run(p, {"action": "MoveAhead"})["lastActionSuccess"] and (p.x, p.z) == (0, -1.8)
    assert _run(p, {"action": "Teleport", "rotation": {"y": 90}})["lastActionSuccess"]  # its own spot is on the grid
    positions = _run(p, {"action": "GetReachablePositions"})["actionReturn"]
    assert {"x": 0.0, "y": 0.9, "z": -1.8} in positions
    # Every agent an Initialize makes is on the grid.
    p = Player(width=16, height=12)
    assert _run(p, {"action": "Initialize", "gridSize": 0.3, "agentCount": 3})["lastActionSuccess"]
    assert all(p._on_grid(a.x, a.z) for a in p.agents)
    # One that can reach no grid point around it (forced into the fridge, off the grid) fails the Initialize, with no
    # errorCode; the settings are kept, as a build's.
    p = Player(width=16, height=12)
    assert _run(p, {"action": "Teleport", "position": {"x": 0.1, "y": 0.9, "z": 1.1}, "forceAction": True})[
        "lastActionSuccess"]
    agent = _run(p, {"action": "Initialize", "gridSize": 0.5})
    assert agent["lastActionSuccess"] is False and agent["errorCode"] is None and "grid" in agent["errorMessage"]
    assert p.grid_size == 0.5 and (p.x, p.z) == (0.1, 1.1)


def test_standing_false_crouches_the_agent_until_it_stands_again():
    p = Player(width=32, height=24)
    md, images = p.handle({"action": "Initialize", "renderDepthImage": True})
    stand_depth = images[1][1].copy()
    agent = _run(p, {"action": "TeleportFull", "position": {"x": 0, "y": 0.9, "z": -2}, "rotation": {"y": 0},
                     "horizon": 0, "standing": False})
    assert agent["lastActionSuccess"], agent["errorMessage"]
    assert agent["agent"]["isStanding"] is False and agent["cameraPosition"] == {"x": 0.0, "y": 0.9, "z": -2.0}
    md, images = p.handle({"action": "Pass"})
    assert _agent(md)["agent"]["isStanding"] is False and not (images[1][1] == stand_depth).all()
    # A teleport without standing (or null) keeps it; a failed one changes nothing; standing true stands.
    assert _run(p, {"action": "Teleport", "rotation": {"y": 90}, "standing": None})["agent"]["isStanding"] is False
    agent = _run(p, {"action": "Teleport", "position": {"x": 0, "y": 0.9, "z": 1.0}, "standing": True})  # the fridge
    assert not agent["lastActionSuccess"] and agent["agent"]["isStanding"] is False
    agent = _run(p, {"action": "Teleport", "standing": True})
    assert agent["agent"]["isStanding"] is True and agent["cameraPosition"]["y"] == 1.575
    # Initialize and Reset make a standing agent.
    assert _run(p, {"action": "Teleport", "standing": False})["agent"]["isStanding"] is False
    assert _run(p, {"action": "Initialize"})["agent"]["isStanding"] is True
    assert _run(p, {"action": "Teleport", "standing": 0})["agent"]["isStanding"] is False
    assert _run(p, {"action": "Reset"})["agent"]["isStanding"] is True

"""GetReachablePositions searches out from the acting agent, as an AI2-THOR 5.x build's getReachablePositions does,
and honours ``maxStepCount``.

* Only the points the search reaches are returned: breadth first from where the agent stands, in steps of gridSize
  along +x, +z, -x, -z, a step taken when its path is free, a point looked at from its first neighbour only (a build
  marks it seen before it sweeps the path). A free spot the search does not reach is not listed; the player listed
  every free spot of the grid.
* ``maxStepCount`` (10000 by default) allows floor(maxStepCount / gridSize^2) steps; a search that takes more throws in
  a build: ``InvalidOperationException: Too many steps taken in GetReachablePositions.``, errorCode null, no
  actionReturn. The player ignored it.
"""

from __future__ import annotations

from renderd.player.core import Player
from renderd.player.scene import SCENES


def _run(p: Player, action: dict) -> dict:
    md, _ = p.handle(action)
    return md["agents"][p.active]


def _points(agent: dict) -> set[tuple[float, float]]:
    return {(q["x"], q["z"]) for q in agent["actionReturn"]}


def test_a_free_spot_the_search_does_not_reach_is_not_listed_and_is_listed_from_there():
    # FloorPlan3 on a 1 m grid: the agent stands at (0, -3), the bench between it and (0, -4), a free spot. The
    # search looks at (0, -4) first from (0, -3), across the bench, and never again (as a build's): it is not listed.
    p = Player(width=16, height=12)
    assert _run(p, {"action": "Reset", "sceneName": "FloorPlan3"})["lastActionSuccess"]
    assert _run(p, {"action": "Initialize", "gridSize": 1.0})["lastActionSuccess"] and (p.x, p.z) == (0, -3)
    scene = SCENES["FloorPlan3"]
    assert scene.collision(0.0, -4.0) is None and scene.path_collision(0.0, -3.0, 0.0, -4.0) is not None
    agent = _run(p, {"action": "GetReachablePositions"})
    points = _points(agent)
    assert agent["lastActionSuccess"] and (0.0, -3.0) in points and (0.0, -4.0) not in points
    assert all(scene.collision(x, z) is None for x, z in points)
    # Standing there, the search starts from it.
    assert _run(p, {"action": "Teleport", "position": {"x": 0.0, "y": 0.9, "z": -4.0}})["lastActionSuccess"]
    assert (0.0, -4.0) in _points(_run(p, {"action": "GetReachablePositions"}))


def test_max_step_count_limits_the_search_as_a_build():
    p = Player(width=16, height=12)
    assert _run(p, {"action": "Initialize"})["lastActionSuccess"]
    every = _run(p, {"action": "GetReachablePositions"})["actionReturn"]
    # 1 allows 1 / 0.25^2 = 16 steps: FloorPlan1 has far more points. The build throws; nothing is returned.
    agent = _run(p, {"action": "GetReachablePositions", "maxStepCount": 1})
    assert agent["lastActionSuccess"] is False and agent["errorCode"] is None and agent["actionReturn"] is None
    assert agent["errorMessage"] == "InvalidOperationException: Too many steps taken in GetReachablePositions."
    # Enough steps (len + 1: the start is taken off the queue twice) give the same points; null is the default.
    enough = -(-(len(every) + 1) // 16)  # maxStepCount * 16 steps allowed
    assert _run(p, {"action": "GetReachablePositions", "maxStepCount": enough})["actionReturn"] == every
    assert _run(p, {"action": "GetReachablePositions", "maxStepCount": None})["actionReturn"] == every
    assert _run(p, {"action": "GetReachablePositions", "maxStepCount": (len(every) + 1) // 16 - 1})[
        "lastActionSuccess"] is False
    # An int parameter: Json.NET rounds a fraction to the nearest integer (Convert.ToInt32), not down; enough - 1
    # steps would fail.
    rounded = _run(p, {"action": "GetReachablePositions", "maxStepCount": enough - 0.4})
    assert rounded["lastActionSuccess"] and rounded["actionReturn"] == every
    # What Json.NET cannot convert (an array) is refused, InvalidArgument; a string .NET cannot parse fails as a
    # build answers the FormatException (errorCode null), returning nothing.
    agent = _run(p, {"action": "GetReachablePositions", "maxStepCount": [100]})
    assert agent["errorCode"] == "InvalidArgument" and agent["errorMessage"] == (
        "action: GetReachablePositions has an invalid argument: maxStepCount (==[100]). Cannot convert to: int")
    agent = _run(p, {"action": "GetReachablePositions", "maxStepCount": "many"})
    assert agent["lastActionSuccess"] is False and agent["errorCode"] is None and agent["actionReturn"] is None
    assert agent["errorMessage"] == "System.FormatException: Input string was not in a correct format."


def test_from_outside_the_room_the_search_fails_as_a_builds_leaving_the_scene_bounds():
    p = Player(width=16, height=12)
    assert _run(p, {"action": "Teleport", "position": {"x": 10.0, "y": 0.9, "z": -2.0}, "forceAction": True})[
        "lastActionSuccess"]
    agent = _run(p, {"action": "GetReachablePositions"})
    assert agent["lastActionSuccess"] is False and agent["errorCode"] is None
    assert agent["errorMessage"].startswith("InvalidOperationException: In FloorPlan1, position (10.2, 0.9, -2.0) ")

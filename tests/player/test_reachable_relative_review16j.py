"""GetReachablePositions' ``directionsRelativeAgent`` steps along the acting agent's own right and forward, as a build's
(docs/player.md, Actions)."""

from __future__ import annotations

import math

from renderd.player.core import Player


def _player() -> Player:
    return Player(width=16, height=12, platform="Linux64", headless=True)


def _step(p: Player, action: dict) -> dict:
    md, _ = p.handle(action)
    return md["agents"][0]


def test_directions_relative_agent_steps_along_the_agents_own_right_and_forward():
    p = _player()
    assert _step(p, {"action": "Initialize", "rotateStepDegrees": 45, "snapToGrid": False})["lastActionSuccess"]
    plain = _step(p, {"action": "GetReachablePositions"})["actionReturn"]
    assert _step(p, {"action": "RotateRight"})["agent"]["rotation"]["y"] == 45
    turned = _step(p, {"action": "GetReachablePositions", "directionsRelativeAgent": True})
    assert turned["lastActionSuccess"], turned["errorMessage"]
    points = turned["actionReturn"]
    # Every point is on the grid through the agent along its right (cos 45, -sin 45) and forward (sin 45, cos 45).
    x0, z0 = p.x, p.z
    right, forward = (math.cos(math.pi / 4), -math.sin(math.pi / 4)), (math.sin(math.pi / 4), math.cos(math.pi / 4))
    for point in points:
        dx, dz = point["x"] - x0, point["z"] - z0
        for axis in (right, forward):
            steps = (dx * axis[0] + dz * axis[1]) / 0.25
            assert abs(steps - round(steps)) < 1e-3, point
    assert {"x": x0, "y": 0.9, "z": z0} in points and points != plain
    assert points == sorted(points, key=lambda q: (q["x"], q["z"]))  # listed x-major, as the default search
    assert _step(p, {"action": "GetReachablePositions", "directionsRelativeAgent": False})["actionReturn"] == plain
    # At a yaw that is a multiple of 90 the turned grid is the world's: the same points.
    assert _step(p, {"action": "RotateRight"})["agent"]["rotation"]["y"] == 90
    assert _step(p, {"action": "GetReachablePositions", "directionsRelativeAgent": "True"})["actionReturn"] == plain
    # A bool parameter with no null: Json.NET cannot convert null or "yes".
    for value, shown in ((None, ""), ("yes", "yes")):
        refused = _step(p, {"action": "GetReachablePositions", "directionsRelativeAgent": value})
        assert refused["errorCode"] == "InvalidArgument" and refused["errorMessage"] == (
            f"action: GetReachablePositions has an invalid argument: directionsRelativeAgent (=={shown}). "
            f"Cannot convert to: Boolean")

"""Failures an AI2-THOR 5.x build's physics agent reports by throwing, worded as it answers them: its ActionDispatcher
catches the exception and answers ``<exception type>: <message>`` with no errorCode (null). The player's own wordings
matched nothing a tool written against a build looks for.

* MoveAhead/Back/Left/Right with a moveMagnitude of 0 or less: ``InvalidOperationException: moveMagnitude must be > 0``;
* RotateLeft/Right by 0 degrees: ``InvalidOperationException: Cannot rotate by 0 degrees as this previously defaulted
  to rotating by a diferent amount.`` (the build's spelling);
* a teleport onto a spot taken: ``InvalidOperationException: Collided with: <objectId>.`` (a wall by its name), and one
  whose y is off the floor: ``InvalidOperationException: After teleporting and adjusting agent position to floor, ...``.

LookUp/LookDown's degrees below 0 or not a multiple of 0.1 are not exceptions in a build: plain errorMessages, as a
build's physics agent words them (``LookUp action requires positive degree value. Invalid value used: -5``).
"""

from __future__ import annotations

import pytest

from renderd.player.core import Player


def _run(p: Player, action: dict) -> dict:
    md, _ = p.handle(action)
    return md["agents"][p.active]


def _unchanged(p: Player) -> bool:
    return (p.x, p.z, p.yaw, p.horizon) == (0, -2, 0, 0)


@pytest.mark.parametrize("name", ["MoveAhead", "MoveBack", "MoveLeft", "MoveRight"])
@pytest.mark.parametrize("magnitude", [0, -0.25])
def test_a_move_of_zero_or_less_is_a_builds_invalid_operation(name, magnitude):
    p = Player(width=16, height=12)
    agent = _run(p, {"action": name, "moveMagnitude": magnitude})
    assert agent["lastActionSuccess"] is False and agent["errorCode"] is None and _unchanged(p)
    assert agent["errorMessage"] == "InvalidOperationException: moveMagnitude must be > 0"


@pytest.mark.parametrize("name", ["RotateLeft", "RotateRight"])
def test_a_turn_of_zero_degrees_is_a_builds_invalid_operation(name):
    p = Player(width=16, height=12)
    agent = _run(p, {"action": name, "degrees": 0})
    assert agent["lastActionSuccess"] is False and agent["errorCode"] is None and _unchanged(p)
    assert agent["errorMessage"] == ("InvalidOperationException: Cannot rotate by 0 degrees as this previously "
                                     "defaulted to rotating by a diferent amount.")


@pytest.mark.parametrize("name", ["LookUp", "LookDown"])
def test_a_looks_bad_degrees_are_worded_as_a_builds(name):
    p = Player(width=16, height=12)
    agent = _run(p, {"action": name, "degrees": -5})
    assert agent["errorCode"] is None and _unchanged(p)
    assert agent["errorMessage"] == f"{name} action requires positive degree value. Invalid value used: -5"
    assert _run(p, {"action": name, "degrees": -2.5})["errorMessage"].endswith("Invalid value used: -2.5")
    agent = _run(p, {"action": name, "degrees": 10.05})
    assert agent["errorCode"] is None and _unchanged(p)
    assert agent["errorMessage"] == f"{name} action requires degree value to be a multiple of 0.1f"


def test_a_teleport_onto_a_taken_spot_or_off_the_floor_is_a_builds_invalid_operation():
    p = Player(width=16, height=12)
    agent = _run(p, {"action": "Teleport", "position": {"x": 0.0, "y": 0.9, "z": 1.0}})  # in the fridge
    assert agent["lastActionSuccess"] is False and agent["errorCode"] is None and _unchanged(p)
    assert agent["errorMessage"] == "InvalidOperationException: Collided with: Fridge|+00.00|+00.90|+01.00."
    agent = _run(p, {"action": "TeleportFull", "position": {"x": 2.9, "y": 0.9, "z": -1.0}, "rotation": {"y": 0},
                     "horizon": 0, "standing": True})  # 0.1 m from the east wall
    assert agent["errorMessage"] == "InvalidOperationException: Collided with: WallEast." and _unchanged(p)
    agent = _run(p, {"action": "Teleport", "position": {"x": 0.0, "y": 2.0, "z": -1.0}})
    assert agent["errorCode"] is None and _unchanged(p)
    assert agent["errorMessage"] == (
        "InvalidOperationException: After teleporting and adjusting agent position to floor, there was too large a "
        "change(1.1 > 0.05) in the y component. Consider using `forceAction=true` if you'd like to teleport anyway.")

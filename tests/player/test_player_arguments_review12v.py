"""Arguments an action does not take: refused as a build's ActionDispatcher refuses them.

An AI2-THOR 5.x build dispatches most actions by their method's signature and fails one whose arguments name no
parameter of the chosen overload (InvalidArgument, the invalid names in its errorMessage); keys its AgentManager
reads on every step (sequenceId, agentId, renderImage and the image switches) are never invalid, and actions that
take a whole ServerAction (Initialize, Reset, LookUp, LookDown) accept any key.
"""

from __future__ import annotations

import pytest

from renderd.player import core
from renderd.player.core import ACTIONS, Player


def _agent(md: dict, i: int = 0) -> dict:
    return md["agents"][i]


def _refused(p: Player, action: dict, *names: str) -> dict:
    before = p.pose
    md, _ = p.handle(action)
    agent = _agent(md)
    assert not agent["lastActionSuccess"], agent
    assert agent["errorCode"] == "InvalidArgument", agent
    assert agent["lastAction"] == action["action"]
    message = agent["errorMessage"]
    assert action["action"] in message, message
    for name in names:
        assert repr(name) in message, message
    assert p.pose == before  # nothing changed
    return agent


@pytest.mark.parametrize("action, invalid", [
    ({"action": "MoveAhead", "foo": 1}, ["foo"]),
    ({"action": "MoveBack", "moveMagnitude": 0.25, "degrees": 30}, ["degrees"]),
    ({"action": "RotateRight", "degrees": 30, "bar": 2}, ["bar"]),
    ({"action": "RotateLeft", "moveMagnitude": 1, "horizon": 0}, ["horizon", "moveMagnitude"]),
    ({"action": "Teleport", "position": {"x": 0, "y": 0.9, "z": -1}, "x": 1.0}, ["x"]),
    ({"action": "TeleportFull", "position": {"x": 0, "y": 0.9, "z": -1}, "rotation": 0, "horizon": 0, "standing": True,
      "yaw": 90},
     ["yaw"]),
    ({"action": "Pass", "foo": None}, ["foo"]),
    ({"action": "Done", "degrees": 30}, ["degrees"]),
    ({"action": "GetScenesInBuild", "sceneName": "FloorPlan2"}, ["sceneName"]),
    ({"action": "GetReachablePositions", "gridSize": 0.5}, ["gridSize"]),
    ({"action": "ChangeResolution", "x": 64, "y": 48, "width": 64}, ["width"]),
    ({"action": "ChangeQuality", "quality": "Low", "level": 1}, ["level"]),
    ({"action": "AddThirdPartyCamera", "position": {}, "rotation": {}, "fov": 60}, ["fov"]),
    ({"action": "UpdateThirdPartyCamera", "thirdPartyCameraId": 0, "horizon": 10}, ["horizon"]),
])
def test_an_argument_no_overload_takes_fails_invalid_argument(action, invalid):
    p = Player(width=16, height=12)
    assert _agent(p.handle({"action": "AddThirdPartyCamera", "position": {}, "rotation": {}})[0])["lastActionSuccess"]
    agent = _refused(p, action, *invalid)
    assert agent["actionReturn"] is None
    # The player carries on: the same action without the stray argument succeeds.
    clean = {k: v for k, v in action.items() if k not in invalid}
    md, _ = p.handle(clean)
    assert _agent(md)["lastActionSuccess"], _agent(md)["errorMessage"]


def test_the_keys_every_step_may_carry_are_never_invalid():
    p = Player(width=16, height=12)
    step = {"sequenceId": 7, "agentId": 0, "renderImage": True, "renderInstanceSegmentation": False,
            "renderObjectImage": False, "renderClassImage": False, "renderNormalsImage": False,
            "renderDepthImage": False}
    for name in ("Pass", "Done", "MoveAhead", "RotateRight", "LookDown", "GetScenesInBuild", "GetReachablePositions"):
        md, _ = p.handle({"action": name, **step})
        assert _agent(md)["lastActionSuccess"], (name, _agent(md)["errorMessage"])
        assert md["sequenceId"] == 7


def test_a_build_s_parameters_the_player_does_not_model_are_taken():
    p = Player(width=16, height=12)
    for action in (
        {"action": "MoveAhead", "moveMagnitude": 0.25, "objectId": "", "forceAction": False, "manualInteract": False,
         "allowAgentsToIntersect": False, "maxAgentsDistance": -1},
        {"action": "RotateLeft", "degrees": 90, "manualInteract": False, "forceAction": False},
        {"action": "Teleport", "position": {"x": 0, "y": 0.9, "z": -1.5}, "standing": True},
        {"action": "GetReachablePositions", "maxStepCount": 100, "directionsRelativeAgent": False},
        {"action": "AddThirdPartyCamera", "position": {}, "rotation": {}, "skyboxColor": "white",
         "orthographic": False, "antiAliasing": "none"},
    ):
        md, _ = p.handle(action)
        assert _agent(md)["lastActionSuccess"], (action, _agent(md)["errorMessage"])


@pytest.mark.parametrize("name, action", [
    ("Initialize", {"gridSize": 0.25, "maxStepCount": 10, "anything": 1, "agentMode": "default"}),
    ("Reset", {"sceneName": "FloorPlan2", "anything": 1}),
    ("LookDown", {"degrees": 30, "anything": 1}),
    ("LookUp", {"anything": 1}),
])
def test_actions_that_take_a_whole_server_action_accept_any_key(name, action):
    p = Player(width=16, height=12)
    md, _ = p.handle({"action": name, **action})
    assert _agent(md)["lastActionSuccess"], _agent(md)["errorMessage"]
    assert core.ACTION_ARGUMENTS[name] is None


def test_teleport_with_x_y_z_takes_the_build_s_other_overload():
    p = Player(width=16, height=12)
    # x and z only: a build dispatches to Teleport(x, y, z, ...) and misses y.
    md, _ = p.handle({"action": "Teleport", "x": 1.0, "z": 0.5})
    assert not _agent(md)["lastActionSuccess"] and _agent(md)["errorCode"] == "MissingArguments"
    assert "'y'" in _agent(md)["errorMessage"] and (p.x, p.z) == (0, -2)
    md, _ = p.handle({"action": "Teleport", "x": 1.0, "y": 0.9, "z": 0.5, "horizon": 30})
    assert _agent(md)["lastActionSuccess"], _agent(md)["errorMessage"]
    assert (p.x, p.z, p.horizon) == (1.0, 0.5, 30)
    md, _ = p.handle({"action": "TeleportFull", "x": -1.0, "y": 0.9, "z": 0.5, "rotation": {"y": 90}, "horizon": 0,
                      "standing": True})
    assert _agent(md)["lastActionSuccess"], _agent(md)["errorMessage"]
    assert (p.x, p.z, p.yaw, p.horizon) == (-1.0, 0.5, 90, 0)
    # That overload takes no position: both is an invalid argument of the one chosen.
    _refused(p, {"action": "Teleport", "x": 1.0, "y": 0.9, "z": 0.5, "position": {"x": 0, "y": 0.9, "z": 0}},
             "position")


def test_every_action_has_its_argument_table_and_the_message_is_bounded():
    assert set(core.ACTION_ARGUMENTS) == set(ACTIONS)
    p = Player(width=16, height=12)
    action = {"action": "Pass", **{f"k{i}" + "x" * 5000: i for i in range(50)}}
    agent = _refused(p, action)
    assert len(agent["errorMessage"]) <= 500 and "more" in agent["errorMessage"]


def test_a_player_process_answers_the_failure_and_carries_on(spawn):
    p = spawn(["-screen-width", "32", "-screen-height", "24"])
    p.start_session()
    ev = p.step({"action": "MoveAhead", "foo": 1})
    assert not ev.metadata["lastActionSuccess"] and ev.metadata["errorCode"] == "InvalidArgument"
    assert "'foo'" in ev.metadata["errorMessage"]
    ev = p.step({"action": "MoveAhead"})
    assert ev.metadata["lastActionSuccess"] and ev.metadata["agent"]["position"]["z"] == -1.75


def test_a_fault_action_with_an_argument_it_does_not_take_is_refused_before_any_fault_runs(spawn):
    # RenderdFault is this player's own action: it takes fault, code, seconds and when. A misspelt one ("cde")
    # would otherwise run the fault with its default.
    p = Player(width=16, height=12)
    agent = _refused(p, {"action": "RenderdFault", "fault": "exit", "cde": 3}, "cde")
    assert "fault, code, seconds, when" in agent["errorMessage"]
    proc = spawn(["-screen-width", "32", "-screen-height", "24"])
    proc.start_session()
    ev = proc.step({"action": "RenderdFault", "fault": "exit", "cde": 3})
    assert not ev.metadata["lastActionSuccess"] and ev.metadata["errorCode"] == "InvalidArgument"
    assert "'cde'" in ev.metadata["errorMessage"]
    assert proc.step({"action": "Pass"}).metadata["lastActionSuccess"]  # still there

"""The reference player's state across Initialize, as a Unity build keeps it or loses it."""

from __future__ import annotations

import pytest

from renderd.protocol import FieldType
from renderd.player.core import Player


def _kinds(images) -> set[FieldType]:
    return {kind for kind, _ in images}


def _moved(p: Player, action: str = "MoveAhead") -> float:
    x, z = p.x, p.z
    md, _ = p.handle({"action": action})
    assert md["agents"][0]["lastActionSuccess"], md["agents"][0]["errorMessage"]
    return ((p.x - x) ** 2 + (p.z - z) ** 2) ** 0.5


def _turned(p: Player) -> float:
    yaw = p.yaw
    p.handle({"action": "RotateRight"})
    return (p.yaw - yaw) % 360


def _visible(p: Player) -> set[str]:
    md, _ = p.handle({"action": "Pass"})
    return {o["objectId"] for o in md["agents"][0]["objects"] if o["visible"]}


def test_initialize_gives_a_parameter_it_is_not_sent_its_default():
    # A build's Initialize takes every parameter from a fresh ServerAction (the agent controller is made
    # anew, its camera's field of view set to 90 before Initialize's own is applied): one not sent is the
    # default, not what an earlier Initialize set.
    p = Player(width=32, height=24)
    far = _visible(p)
    md, _ = p.handle({"action": "Initialize", "gridSize": 0.5, "rotateStepDegrees": 30, "snapToGrid": False,
                      "fieldOfView": 60, "visibilityDistance": 10.0, "renderDepthImage": True, "renderInstanceSegmentation": True})
    assert md["agents"][0]["lastActionSuccess"]
    assert _visible(p) > far
    md, images = p.handle({"action": "Initialize"})
    assert md["agents"][0]["lastActionSuccess"], md["agents"][0]["errorMessage"]
    assert md["agents"][0]["fov"] == 90
    assert _kinds(images) == {FieldType.RGB_IMAGE}
    assert _visible(p) == far
    assert _moved(p) == pytest.approx(0.25)
    assert _turned(p) == pytest.approx(90)


def test_initialize_without_a_switch_turns_it_off_and_a_null_one_fails_as_json_net_reads_it():
    # A switch not given is Initialize's default (off), not the earlier Initialize's value. null is no bool: a
    # build's Json.NET cannot read the action into its ServerAction and throws (errorCode null), nothing applied.
    p = Player(width=32, height=24)
    assert p.handle({"action": "Initialize", "renderDepthImage": True})[0]["agents"][0]["lastActionSuccess"]
    md, images = p.handle({"action": "Initialize", "renderDepthImage": None, "gridSize": 0.5})
    assert not md["agents"][0]["lastActionSuccess"] and md["agents"][0]["errorCode"] is None
    assert "{null} to type 'System.Boolean'. Path 'renderDepthImage'." in md["agents"][0]["errorMessage"]
    assert FieldType.DEPTH_IMAGE in _kinds(images) and p.grid_size == 0.25
    md, images = p.handle({"action": "Initialize", "gridSize": 0.5})
    assert md["agents"][0]["lastActionSuccess"]
    assert _kinds(images) == {FieldType.RGB_IMAGE}


def test_a_failed_initialize_keeps_the_settings():
    # A refused Initialize applies nothing, defaults included: one the player refuses for its own reasons
    # (a build's own failures apply part, see test_player_fidelity_review11.py).
    p = Player(width=32, height=24)
    assert p.handle({"action": "Initialize", "gridSize": 0.5, "renderDepthImage": True})[0]["agents"][0][
        "lastActionSuccess"]
    md, images = p.handle({"action": "Initialize", "gridSize": 0.001})
    assert not md["agents"][0]["lastActionSuccess"] and md["agents"][0]["errorCode"] == "InvalidArgument"
    assert FieldType.DEPTH_IMAGE in _kinds(images)
    assert _moved(p) == pytest.approx(0.5)


@pytest.mark.parametrize("name", [None, ""])
def test_reset_with_a_null_or_empty_scene_name_reloads_the_current_scene(name):
    # A build's Reset loads the active scene again when sceneName is null or empty (AgentManager's
    # ResetCoroutine), as when it is not sent at all.
    p = Player(width=32, height=24)
    assert p.handle({"action": "Reset", "sceneName": "FloorPlan2_physics"})[0]["agents"][0]["lastActionSuccess"]
    start = p.pose
    p.handle({"action": "RotateRight"})
    p.handle({"action": "AddThirdPartyCamera", "position": {"x": 0, "y": 2, "z": 0},
              "rotation": {"x": 90, "y": 0, "z": 0}})
    md, _ = p.handle({"action": "Reset", "sceneName": name})
    agent = md["agents"][0]
    assert agent["lastActionSuccess"], agent["errorMessage"]
    assert agent["sceneName"] == "FloorPlan2_physics" and p.pose == start
    assert agent["thirdPartyCameras"] == []


def test_update_third_party_camera_keeps_the_axes_it_is_not_given():
    # A build's UpdateThirdPartyCamera takes position and rotation as optional vectors: an axis not
    # given, or null, keeps the camera's value (AgentManager.UpdateThirdPartyCamera); the player set it to 0.
    p = Player(width=32, height=24)
    md, _ = p.handle({"action": "AddThirdPartyCamera", "position": {"x": 1.0, "y": 2.0, "z": -1.0},
                      "rotation": {"x": 30.0, "y": 45.0, "z": 0.0}})
    assert md["agents"][0]["lastActionSuccess"], md["agents"][0]["errorMessage"]
    md, _ = p.handle({"action": "UpdateThirdPartyCamera", "thirdPartyCameraId": 0, "position": {"y": 2.2},
                      "rotation": {"x": None, "y": 90.0}})
    assert md["agents"][0]["lastActionSuccess"], md["agents"][0]["errorMessage"]
    camera = md["agents"][0]["thirdPartyCameras"][0]
    assert camera["position"] == {"x": 1.0, "y": 2.2, "z": -1.0}
    assert camera["rotation"] == {"x": 30.0, "y": 90.0, "z": 0.0}
    md, _ = p.handle({"action": "UpdateThirdPartyCamera", "thirdPartyCameraId": 0, "position": None,
                      "fieldOfView": 60})
    assert md["agents"][0]["lastActionSuccess"], md["agents"][0]["errorMessage"]
    assert md["agents"][0]["thirdPartyCameras"][0]["position"] == {"x": 1.0, "y": 2.2, "z": -1.0}
    md, _ = p.handle({"action": "UpdateThirdPartyCamera", "thirdPartyCameraId": 0, "position": {"x": "left"}})
    assert not md["agents"][0]["lastActionSuccess"] and md["agents"][0]["errorCode"] is None  # Json.NET's reader
    assert md["agents"][0]["errorMessage"] == (
        "Newtonsoft.Json.JsonReaderException: Could not convert string to double: left. Path 'position.x'.")
    assert md["agents"][0]["thirdPartyCameras"][0]["position"] == {"x": 1.0, "y": 2.2, "z": -1.0}


def test_initialize_takes_a_zero_size_as_not_given():
    # In a build, gridSize, fieldOfView and visibilityDistance of 0 (ServerAction's own defaults) mean "not
    # given" (BaseFPSAgentController.Initialize: gridSize 0 becomes 0.25, a field of view or visibility
    # distance that is not above 0 is not applied), while a rotateStepDegrees of 0 is refused.
    p = Player(width=32, height=24)
    md, _ = p.handle({"action": "Initialize", "gridSize": 0, "fieldOfView": 0, "visibilityDistance": 0})
    agent = md["agents"][0]
    assert agent["lastActionSuccess"], agent["errorMessage"]
    assert agent["fov"] == 90 and (p.grid_size, p.visibility_distance) == (0.25, 1.5)
    md, _ = p.handle({"action": "Initialize", "gridSize": 0.5, "rotateStepDegrees": 0})
    assert md["agents"][0]["errorCode"] is None and p.grid_size == 0.25  # a build's failure: no errorCode


@pytest.mark.parametrize("action, degrees", [("LookUp", 60), ("LookDown", 90)])
def test_a_look_past_the_limit_has_a_build_error_code(action, degrees):
    # A build's physics agent fails a look past its limit with errorCode LookDownCantExceedMin, looking up
    # as well as down (PhysicsRemoteFPSAgentController.LookUp / LookDown), and an errorMessage naming the limit.
    p = Player(width=32, height=24)
    md, _ = p.handle({"action": action, "degrees": degrees})
    agent = md["agents"][0]
    assert not agent["lastActionSuccess"] and agent["agent"]["cameraHorizon"] == 0
    assert agent["errorCode"] == "LookDownCantExceedMin"
    assert agent["errorMessage"].startswith("can't look")
    md, _ = p.handle({"action": "Pass"})
    assert md["agents"][0]["errorCode"] is None

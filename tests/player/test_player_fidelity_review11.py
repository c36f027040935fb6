"""The reference player answers as an AI2-THOR build does where the two once differed: errorCode values,
per-step switches, Initialize's checks and their order, and answers that must fit the transport."""

from __future__ import annotations

import json

import msgpack
import pytest

from renderd.protocol import FieldType
from renderd.player.core import Player
from tests.helpers.fifo_driver import PlayerProcess


def _agent(md: dict, i: int = 0) -> dict:
    return md["agents"][i]


def _kinds(images) -> set[FieldType]:
    return {kind for kind, _ in images}


# -- errorCode ---------------------------------------------------------------------------------------------
def test_error_code_is_null_unless_the_failure_has_a_code(tmp_path):
    # A build's metadata has errorCode as a string set only when the code is not Undefined: null for the first
    # message, a successful action and a failure that sets no code (a blocked move); a name for the others.
    with PlayerProcess(tmp_path, ["-screen-width", "32", "-screen-height", "24"]) as p:
        first = p.start_session()
        assert first.metadata["errorCode"] is None
        ok = p.step("MoveAhead")
        assert ok and ok.metadata["errorCode"] is None and ok.metadata["errorMessage"] == ""
        blocked = p.step("MoveAhead", moveMagnitude=10)
        assert not blocked and blocked.metadata["errorCode"] is None
        assert "is blocking Agent 0" in blocked.metadata["errorMessage"]
        unknown = p.step("Fly")
        assert not unknown and unknown.metadata["errorCode"] == "InvalidAction"
        missing = p.step("TeleportFull", position={"x": 0, "y": 0.9, "z": 0})
        assert not missing and missing.metadata["errorCode"] == "MissingArguments"


def test_error_code_null_packs_as_nil_and_json_null():
    p = Player(width=16, height=16)
    answer = p.answer({"action": "Teleport", "position": {"x": 9, "y": 0.9, "z": 9}})
    assert _agent(msgpack.unpackb(answer.packed_metadata()))["errorCode"] is None
    assert _agent(json.loads(answer.json_metadata()))["errorCode"] is None
    assert _agent(answer.metadata())["lastActionSuccess"] is False


# -- a step's renderInstanceSegmentation ---------------------------------------------------------------------
@pytest.mark.parametrize("off", [False, 0, "false"])
def test_a_step_cannot_switch_segmentation_off(off):
    # A build's AgentManager.ProcessControlCommand only ever switches segmentation on for a step: false leaves
    # Initialize's setting (its step default is indistinguishable from "not sent").
    p = Player(width=16, height=12)
    assert _agent(p.handle({"action": "Initialize", "renderInstanceSegmentation": True})[0])["lastActionSuccess"]
    md, images = p.handle({"action": "MoveAhead", "renderInstanceSegmentation": off})
    assert _agent(md)["lastActionSuccess"] and FieldType.IDS_IMAGE in _kinds(images)


def test_a_step_switches_segmentation_on_for_an_agent_action_only():
    p = Player(width=16, height=12)
    assert FieldType.IDS_IMAGE in _kinds(p.handle({"action": "Pass", "renderInstanceSegmentation": True})[1])
    assert FieldType.IDS_IMAGE not in _kinds(p.handle({"action": "Pass"})[1])  # for that step only
    # The AgentManager's own actions send Initialize's setting whatever the step says.
    for action in ({"action": "ChangeResolution", "x": 16, "y": 12},
                   {"action": "AddThirdPartyCamera", "position": {"x": 0, "y": 2, "z": 0}, "rotation": {"x": 90}},
                   {"action": "UpdateThirdPartyCamera", "thirdPartyCameraId": 0, "fieldOfView": 60},
                   {"action": "Reset"}):
        md, images = p.handle({**action, "renderInstanceSegmentation": True})
        assert _agent(md)["lastActionSuccess"], _agent(md)["errorMessage"]
        assert not {FieldType.IDS_IMAGE, FieldType.THIRD_PARTY_IMAGE_IDS} & _kinds(images), action["action"]


# -- Initialize, in a build's order -------------------------------------------------------------------------
def _turned(p: Player, action: str = "RotateRight") -> float:
    yaw = p.yaw
    md, _ = p.handle({"action": action})
    assert _agent(md)["lastActionSuccess"], _agent(md)["errorMessage"]
    return (p.yaw - yaw) % 360


def _visible(p: Player) -> int:
    return sum(o["visible"] for o in _agent(p.handle({"action": "Pass"})[0])["objects"])


def test_a_rotate_step_off_the_grid_fails_with_snap_to_grid_and_is_kept():
    # A build's Initialize applies rotateStepDegrees, then fails it when snapToGrid (true unless sent) is on and
    # the step is not 90, 180, 270 or a multiple of 360; what comes after it (visibilityDistance, gridSize) is not
    # applied, and AgentManager still sets the image switches. The failure has no errorCode.
    p = Player(width=32, height=24)
    near = _visible(p)
    md, images = p.handle({"action": "Initialize", "rotateStepDegrees": 45, "gridSize": 0.5, "visibilityDistance": 10,
                           "renderDepthImage": True})
    agent = _agent(md)
    assert not agent["lastActionSuccess"] and agent["errorCode"] is None
    assert "snapToGrid" in agent["errorMessage"] and "45" in agent["errorMessage"]
    assert FieldType.DEPTH_IMAGE in _kinds(images)
    assert _turned(p) == pytest.approx(45) and _turned(p, "RotateLeft") == pytest.approx(315)
    assert (p.grid_size, p.visibility_distance) == (0.25, 1.5) and _visible(p) <= near + 1


@pytest.mark.parametrize("degrees, snap", [(45, False), (45, "false"), (720, None), (180, True)])
def test_a_rotate_step_on_the_grid_or_without_snap_to_grid_is_taken(degrees, snap):
    p = Player(width=32, height=24)
    action = {"action": "Initialize", "rotateStepDegrees": degrees}
    if snap is not None:
        action["snapToGrid"] = snap
    md, _ = p.handle(action)
    assert _agent(md)["lastActionSuccess"], _agent(md)["errorMessage"]
    assert _turned(p) == pytest.approx(degrees % 360)


def test_a_failed_initialize_keeps_what_a_build_applied_before_the_failure():
    p = Player(width=32, height=24)
    assert _agent(p.handle({"action": "Initialize", "gridSize": 0.5, "fieldOfView": 60})[0])["lastActionSuccess"]
    # The field of view fails first: nothing else of the agent's is applied (the defaults of a new agent
    # controller), the image switches are.
    md, images = p.handle({"action": "Initialize", "fieldOfView": 200, "gridSize": 0.75,
                           "renderInstanceSegmentation": True})
    agent = _agent(md)
    assert not agent["lastActionSuccess"] and agent["errorCode"] is None and agent["fov"] == 90
    assert FieldType.IDS_IMAGE in _kinds(images) and p.grid_size == 0.25
    # The grid size fails last: the field of view, the rotation step and the visibility distance are applied.
    md, images = p.handle({"action": "Initialize", "fieldOfView": 60, "rotateStepDegrees": 180,
                           "visibilityDistance": 10, "gridSize": 7})
    agent = _agent(md)
    assert not agent["lastActionSuccess"] and agent["errorCode"] is None and "gridSize" in agent["errorMessage"]
    assert agent["fov"] == 60 and (p.rotate_step, p.visibility_distance, p.grid_size) == (180, 10, 0.25)
    assert FieldType.IDS_IMAGE not in _kinds(images)


def test_a_failed_initialize_still_makes_the_agents_which_all_report_it():
    p = Player(width=32, height=24)
    md, _ = p.handle({"action": "Initialize", "agentCount": 3, "rotateStepDegrees": 30})
    assert len(md["agents"]) == 3 and len(p.agents) == 3
    assert all(a["lastAction"] == "Initialize" and a["lastActionSuccess"] is False and a["errorCode"] is None
               for a in md["agents"])
    # An action a build cannot read into its ServerAction (a value that is not a number) applies nothing: Json.NET
    # throws before Initialize runs (errorCode null).
    md, _ = p.handle({"action": "Initialize", "rotateStepDegrees": "ninety", "renderDepthImage": True})
    assert not _agent(md)["lastActionSuccess"] and _agent(md)["errorCode"] is None
    assert "JsonReaderException" in _agent(md)["errorMessage"]
    assert len(p.agents) == 3 and p.render_depth is False


def test_a_turn_takes_any_degrees_but_zero():
    # A build's physics agent turns by any degrees, rotateStepDegrees when none (or null) is given, and fails a
    # turn of 0 degrees (an InvalidOperationException: no errorCode).
    p = Player(width=16, height=12)
    md, _ = p.handle({"action": "RotateRight", "degrees": 0})
    assert not _agent(md)["lastActionSuccess"] and _agent(md)["errorCode"] is None and p.yaw == 0
    assert _agent(p.handle({"action": "RotateRight", "degrees": 750})[0])["lastActionSuccess"] and p.yaw == 30
    assert _agent(p.handle({"action": "RotateLeft", "degrees": None})[0])["lastActionSuccess"] and p.yaw == 300


# -- every agent keeps its actionReturn: the answer must still fit the transport ------------------------------
def test_kept_reachable_positions_never_make_the_metadata_too_large_for_the_transport():
    # Each agent's map keeps its last actionReturn; GetReachablePositions at a 1 cm grid returns about 230,000
    # positions (about 8 MB). A second agent running it would have made a metadata field larger than this
    # "transport" carries; it is refused instead, and the answer (agent 0's positions still in it) fits.
    limit = 10_000_000
    p = Player(width=16, height=12)
    p.limit_metadata_size(limit)
    md, _ = p.handle({"action": "Initialize", "agentCount": 2, "gridSize": 0.01})
    assert all(a["lastActionSuccess"] for a in md["agents"]), md["agents"][0]["errorMessage"]
    answer = p.answer({"action": "GetReachablePositions"})
    assert _agent(answer.metadata())["lastActionSuccess"] and len(_agent(answer.metadata())["actionReturn"]) > 200_000
    answer = p.answer({"action": "GetReachablePositions", "agentId": 1})
    refused = _agent(answer.metadata(), 1)
    assert refused["lastActionSuccess"] is False and refused["errorCode"] == "InvalidArgument"
    assert "actionReturn" in refused["errorMessage"] and str(limit) in refused["errorMessage"]
    assert len(_agent(answer.metadata(), 0)["actionReturn"]) > 200_000
    assert len(answer.packed_metadata()) <= limit and len(answer.json_metadata()) <= limit
    # A coarser grid's positions fit.
    assert _agent(p.handle({"action": "Initialize", "agentCount": 2})[0], 1)["lastActionSuccess"]
    assert _agent(p.answer({"action": "GetReachablePositions", "agentId": 1}).metadata(), 1)["lastActionSuccess"]


def test_a_kept_action_return_counts_against_the_answer_size():
    # Metadata beyond the allowance an answer keeps for it (16 MiB per agent) counts too: synthetic objects and
    # a 1 cm grid's positions together are more than that.
    p = Player(width=16, height=12, metadata_objects=12000)
    limit = p.largest_answer_size(16, 12, 0) + (1 << 20)
    p.limit_answer_size(limit)
    assert _agent(p.handle({"action": "Initialize", "gridSize": 0.01})[0])["lastActionSuccess"]
    answer = p.answer({"action": "GetReachablePositions"})
    agent = _agent(answer.metadata())
    assert agent["lastActionSuccess"] is False and agent["errorCode"] == "InvalidArgument", agent["errorMessage"][:80]
    assert len(answer.packed_metadata()) + sum(image.nbytes for _, image in answer.images) <= limit


# -- moves and looks, as a build's physics agent --------------------------------------------------------------
def test_a_move_of_zero_or_less_fails_without_an_error_code_and_null_moves_a_grid_step():
    p = Player(width=16, height=12)
    for magnitude in (0, -0.25):
        md, _ = p.handle({"action": "MoveAhead", "moveMagnitude": magnitude})
        assert not _agent(md)["lastActionSuccess"] and _agent(md)["errorCode"] is None and p.z == -2.0
        assert "moveMagnitude" in _agent(md)["errorMessage"]
    assert _agent(p.handle({"action": "MoveAhead", "moveMagnitude": None})[0])["lastActionSuccess"] and p.z == -1.75


def test_a_look_of_zero_degrees_looks_thirty_and_a_bad_one_fails_without_an_error_code():
    p = Player(width=16, height=12)
    assert _agent(p.handle({"action": "LookDown", "degrees": 0})[0])["lastActionSuccess"] and p.horizon == 30
    for degrees in (-10, 10.05):
        md, _ = p.handle({"action": "LookUp", "degrees": degrees})
        assert not _agent(md)["lastActionSuccess"] and _agent(md)["errorCode"] is None and p.horizon == 30
    # Any look past the limit is the build's LookDownCantExceedMin, however far.
    md, _ = p.handle({"action": "LookDown", "degrees": 500})
    assert _agent(md)["errorCode"] == "LookDownCantExceedMin" and p.horizon == 30
    assert _agent(p.handle({"action": "LookUp", "degrees": 45.5})[0])["lastActionSuccess"] and p.horizon == -15.5


# -- third-party cameras, as a build's AgentManager checks them ----------------------------------------------
def test_a_camera_field_of_view_outside_a_builds_range_fails_without_an_error_code():
    p = Player(width=16, height=12)
    camera = {"action": "AddThirdPartyCamera", "position": {"x": 0, "y": 2, "z": 0}, "rotation": {"x": 90}}
    for fov in (0, -5, 180, 500):
        md, _ = p.handle({**camera, "fieldOfView": fov})
        assert not _agent(md)["lastActionSuccess"] and _agent(md)["errorCode"] is None and not p.cameras
    md, _ = p.handle({**camera, "fieldOfView": 179.5})  # a build's, not this player's
    assert _agent(md)["errorCode"] == "InvalidArgument" and not p.cameras
    assert _agent(p.handle(camera)[0])["lastActionSuccess"] and p.cameras[0].fov == 90
    md, _ = p.handle({"action": "UpdateThirdPartyCamera", "thirdPartyCameraId": 3, "fieldOfView": 60})
    assert not _agent(md)["lastActionSuccess"] and _agent(md)["errorCode"] is None
    md, _ = p.handle({"action": "UpdateThirdPartyCamera", "thirdPartyCameraId": 0, "fieldOfView": 0})
    assert not _agent(md)["lastActionSuccess"] and _agent(md)["errorCode"] is None and p.cameras[0].fov == 90


def test_a_null_camera_field_of_view_keeps_the_cameras():
    # As a position or rotation not given (or null) does: a build takes all three as optional values.
    p = Player(width=16, height=12)
    p.handle({"action": "AddThirdPartyCamera", "position": {"x": 0, "y": 2, "z": 0}, "rotation": {"x": 90}})
    md, _ = p.handle({"action": "UpdateThirdPartyCamera", "thirdPartyCameraId": 0.0, "fieldOfView": None,
                      "position": {"y": 2.5}})
    assert _agent(md)["lastActionSuccess"], _agent(md)["errorMessage"]
    assert _agent(md)["thirdPartyCameras"][0]["fieldOfView"] == 90 and _agent(md)["thirdPartyCameras"][0]["position"]["y"] == 2.5


def test_a_teleport_horizon_past_the_look_limits_fails_without_an_error_code_and_null_is_not_given():
    p = Player(width=16, height=12)
    for action in ("Teleport", "TeleportFull"):
        md, _ = p.handle({"action": action, "position": {"x": 0.5, "y": 0.9, "z": -2}, "rotation": {"y": 90},
                          "horizon": 75, "standing": True})
        assert not _agent(md)["lastActionSuccess"] and _agent(md)["errorCode"] is None and p.x == 0
        assert "horizon" in _agent(md)["errorMessage"]
    md, _ = p.handle({"action": "Teleport", "position": {"x": 0.5, "y": 0.9, "z": -2}, "rotation": None,
                      "horizon": None})
    assert _agent(md)["lastActionSuccess"], _agent(md)["errorMessage"]
    assert (p.x, p.yaw, p.horizon) == (0.5, 0, 0)


def test_the_camera_actions_return_nothing_as_a_builds():
    # A build's AgentManager finishes AddThirdPartyCamera and UpdateThirdPartyCamera with actionFinished(true):
    # actionReturn null; the camera is in thirdPartyCameras.
    p = Player(width=16, height=12)
    md, _ = p.handle({"action": "AddThirdPartyCamera", "position": {"x": 0, "y": 2, "z": 0}, "rotation": {"x": 90}})
    assert _agent(md)["lastActionSuccess"] and _agent(md)["actionReturn"] is None
    assert _agent(md)["thirdPartyCameras"][0]["position"] == {"x": 0, "y": 2, "z": 0}
    md, _ = p.handle({"action": "UpdateThirdPartyCamera", "thirdPartyCameraId": 0, "fieldOfView": 60})
    assert _agent(md)["lastActionSuccess"] and _agent(md)["actionReturn"] is None
    assert _agent(md)["thirdPartyCameras"][0]["fieldOfView"] == 60


@pytest.mark.parametrize("count, made", [(0, 1), (-3, 1), (7, 6), (100, 6)])
def test_an_agent_count_out_of_range_is_taken_as_a_build_takes_it(count, made):
    # A build's AgentManager adds agents while there are fewer than min(agentColors (6), agentCount): one agent for
    # an agentCount under 2, six for one over 6, and the Initialize succeeds.
    p = Player(width=16, height=12)
    md, _ = p.handle({"action": "Initialize", "agentCount": count})
    assert len(md["agents"]) == made and all(a["lastActionSuccess"] for a in md["agents"])

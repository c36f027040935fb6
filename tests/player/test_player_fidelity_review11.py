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
        assert not blocked and blocked.metadata["errorCode"] is None and "blocked" in blocked.metadata["errorMessage"]
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

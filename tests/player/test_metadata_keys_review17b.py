"""The reference player's agent maps are a build's (docs/player.md, Metadata): every agent's map has its
``agentId`` (one agent's too), and the keys of an AI2-THOR 5 build's MetadataWrapper with a build's types and default
values (``heldObjectPose`` where a build's hand is, ``arm`` null, ``collided`` false, ``cameraOrthSize`` -1, the
extra return slots empty), in every form an answer takes and on every ``--static-frame`` Pass."""

from __future__ import annotations

import json
import math

import msgpack
import pytest

from renderd.player.core import Player
from tests.helpers.fifo_driver import PlayerProcess

#: What a build's map (MetadataWrapper) holds for its default agent with nothing held and no extra action return.
BUILD_DEFAULTS = {
    "arm": None,
    "collided": False,
    "collidedObjects": [],
    "cameraOrthSize": -1.0,
    "flatSurfacesOnGrid": [],
    "distances": [],
    "normals": [],
    "isOpenableGrid": [],
    "segmentedObjectIds": [],
    "objectIdsInBox": [],
    "actionIntReturn": 0,
    "actionFloatReturn": 0.0,
    "actionStringsReturn": [],
    "actionFloatsReturn": [],
    "actionVector3sReturn": [],
    "visibleRange": None,
}


def _player(**kwargs) -> Player:
    return Player(width=16, height=12, platform="Linux64", headless=True, **kwargs)


def _agent(p: Player, action: dict, index: int = 0) -> dict:
    md, _ = p.handle(action)
    return md["agents"][index]


def _every_form(answer) -> list[dict]:
    """The answer's metadata as a dict, as msgpack (FIFO) and as JSON (HTTP) carry it."""
    return [answer.metadata(), msgpack.unpackb(answer.packed_metadata(), raw=False),
            json.loads(answer.json_metadata())]


def _close(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert a[key] == pytest.approx(b[key], abs=1e-4), key


def test_one_agent_s_map_has_its_agent_id_as_a_build_s_does():
    # A build's AgentManager sets every map's agentId (its index), one agent's too.
    p = _player()
    for answer in (p.first_answer(), p.answer({"action": "Pass", "sequenceId": 1})):
        for md in _every_form(answer):
            assert md["agents"][0]["agentId"] == 0 and md["activeAgentId"] == 0
    md, _ = p.handle({"action": "Initialize", "agentCount": 2})
    assert [a["agentId"] for a in md["agents"]] == [0, 1]
    md, _ = p.handle({"action": "Reset"})
    assert [a["agentId"] for a in md["agents"]] == [0]


def test_an_agent_s_map_has_a_build_s_keys_types_and_defaults():
    p = _player()
    answer = p.answer({"action": "Pass"})
    for md in _every_form(answer):
        agent = md["agents"][0]
        for key, value in BUILD_DEFAULTS.items():
            assert agent[key] == value and type(agent[key]) is type(value), key
        pose = agent["heldObjectPose"]
        assert list(pose) == ["position", "rotation", "localPosition", "localRotation"]
        assert pose["localPosition"] == {"x": 0.0, "y": -0.16, "z": 0.38}
        assert pose["localRotation"] == {"x": 0.0, "y": 0.0, "z": 0.0}
        # The hand is the camera's child: 0.16 m below it and 0.38 m ahead of it, turned as it is.
        camera = agent["cameraPosition"]
        _close(pose["position"], {"x": camera["x"], "y": camera["y"] - 0.16, "z": camera["z"] + 0.38})
        assert pose["rotation"] == {"x": 0.0, "y": 0.0, "z": 0.0}
        assert all(type(v) is float for part in pose.values() for v in part.values())


def test_the_hand_follows_the_agent_s_camera_as_a_child_of_it():
    p = _player()
    p.handle({"action": "RotateRight", "degrees": 90})
    agent = _agent(p, {"action": "LookDown", "degrees": 30})
    camera, pose = agent["cameraPosition"], agent["heldObjectPose"]
    pitch = math.radians(30)
    # Looking along +x, 30 degrees down: ahead is (cos 30, -sin 30, 0), the camera's up (sin 30, cos 30, 0).
    _close(pose["position"], {"x": camera["x"] + 0.38 * math.cos(pitch) - 0.16 * math.sin(pitch),
                              "y": camera["y"] - 0.38 * math.sin(pitch) - 0.16 * math.cos(pitch),
                              "z": camera["z"]})
    assert pose["rotation"] == {"x": 30.0, "y": 90.0, "z": 0.0}
    crouched = _agent(p, {"action": "Crouch"})
    assert crouched["heldObjectPose"]["position"]["y"] == pytest.approx(pose["position"]["y"] - 0.675, abs=1e-4)
    assert crouched["heldObjectPose"]["localPosition"] == pose["localPosition"]


def test_a_static_frame_player_process_sends_the_build_s_keys_on_every_pass(tmp_path):
    with PlayerProcess(tmp_path, ["-screen-width", "32", "-screen-height", "24", "--static-frame"]) as p:
        first = p.start_session()
        assert first.metadata["agentId"] == 0
        for seq in range(3):
            ev = p.step("Pass")
            assert ev and ev.metadata["agentId"] == 0
            for key, value in BUILD_DEFAULTS.items():
                assert ev.metadata[key] == value, key
            assert ev.metadata["heldObjectPose"]["localPosition"] == {"x": 0.0, "y": -0.16, "z": 0.38}

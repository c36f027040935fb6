"""Where the reference player puts the third-party cameras in its metadata: as a build's AgentManager does, in
each agent's map (a list, empty with no camera) when the answer carries images, null when it carries none
(renderImage false, -nographics); the top-level ``thirdPartyCameras`` key is always null."""

from __future__ import annotations

import json

import msgpack

from renderd.player.core import Player
from renderd.protocol import FieldType

CAMERA = {"action": "AddThirdPartyCamera", "position": {"x": 0, "y": 2, "z": 0}, "rotation": {"x": 90, "y": 0, "z": 0}}


def _same_everywhere(answer) -> dict:
    """The answer's metadata, checked to be the same as a dict, packed and as JSON."""
    md = answer.metadata()
    assert answer.packed_metadata() == msgpack.packb(md, use_bin_type=True)
    assert answer.json_metadata() == json.dumps(md, separators=(",", ":")).encode("utf-8")
    return md


def test_cameras_are_in_each_agent_map_and_the_top_level_key_is_null():
    p = Player(width=16, height=12)
    md = _same_everywhere(p.first_answer())
    assert "thirdPartyCameras" in md and md["thirdPartyCameras"] is None
    assert md["agents"][0]["thirdPartyCameras"] == []
    md = _same_everywhere(p.answer(CAMERA))
    assert md["thirdPartyCameras"] is None
    assert [c["thirdPartyCameraId"] for c in md["agents"][0]["thirdPartyCameras"]] == [0]
    # Every agent's map lists the cameras.
    md = _same_everywhere(p.answer({"action": "Initialize", "agentCount": 2}))
    assert md["thirdPartyCameras"] is None
    assert [len(a["thirdPartyCameras"]) for a in md["agents"]] == [1, 1]


def test_an_answer_without_images_has_no_camera_list():
    p = Player(width=16, height=12)
    assert p.answer(CAMERA).metadata()["agents"][0]["thirdPartyCameras"]
    for off in (False, 0, "false"):
        answer = p.answer({"action": "Pass", "renderImage": off})
        assert answer.images == []
        md = _same_everywhere(answer)
        assert md["agents"][0]["thirdPartyCameras"] is None and md["thirdPartyCameras"] is None
    # The next step with images lists the camera again (the views are cached per state).
    answer = p.answer({"action": "Pass"})
    assert [kind for kind, _ in answer.images] == [FieldType.THIRD_PARTY_IMAGE, FieldType.RGB_IMAGE]
    assert len(_same_everywhere(answer)["agents"][0]["thirdPartyCameras"]) == 1


def test_a_player_without_graphics_never_lists_cameras():
    p = Player(width=16, height=12, headless=True)
    assert _same_everywhere(p.first_answer())["agents"][0]["thirdPartyCameras"] is None
    md = _same_everywhere(p.answer(CAMERA))
    assert md["agents"][0]["lastActionSuccess"] and md["agents"][0]["thirdPartyCameras"] is None


def test_the_wire_carries_nil_at_the_top_level(spawn):
    # A real player over real FIFOs: the METADATA body itself, as AI2-THOR's FifoServer unpacks it.
    p = spawn(["-screen-width", "16", "-screen-height", "12"])
    first = msgpack.unpackb(bytes(p.recv_message().first(FieldType.METADATA)), raw=False)
    assert first["thirdPartyCameras"] is None and first["agents"][0]["thirdPartyCameras"] == []
    p.open_client()
    p.send(CAMERA)
    md = msgpack.unpackb(bytes(p.recv_message().first(FieldType.METADATA)), raw=False)
    assert md["thirdPartyCameras"] is None and len(md["agents"][0]["thirdPartyCameras"]) == 1
    p.send({"action": "Pass", "renderImage": False})
    message = p.recv_message()
    assert [kind for kind, _ in message.fields] == [FieldType.METADATA]
    md = msgpack.unpackb(bytes(message.first(FieldType.METADATA)), raw=False)
    assert md["thirdPartyCameras"] is None and md["agents"][0]["thirdPartyCameras"] is None

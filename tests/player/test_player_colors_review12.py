"""An agent's ``colors`` (segmentation colour -> object id), as a build's AgentManager sends it: listed in an answer
that carries the agent's instance segmentation image, null in any other (its AgentManager fills the list only
where it adds that image)."""

from __future__ import annotations

import json

import msgpack

from renderd.player.core import Player
from renderd.protocol import FieldType


def _same_everywhere(answer) -> dict:
    md = answer.metadata()
    assert answer.packed_metadata() == msgpack.packb(md, use_bin_type=True)
    assert answer.json_metadata() == json.dumps(md, separators=(",", ":")).encode("utf-8")
    return md


def _kinds(answer) -> list[FieldType]:
    return [kind for kind, _ in answer.images]


def test_colors_come_with_the_segmentation_image_only():
    p = Player(width=16, height=12)
    assert _same_everywhere(p.first_answer())["agents"][0]["colors"] is None
    answer = p.answer({"action": "Pass"})
    assert FieldType.IDS_IMAGE not in _kinds(answer) and _same_everywhere(answer)["agents"][0]["colors"] is None
    # A step's switch: the list for that step, naming every part (and so every colour the image shows).
    answer = p.answer({"action": "Pass", "renderInstanceSegmentation": True})
    assert FieldType.IDS_IMAGE in _kinds(answer)
    colors = _same_everywhere(answer)["agents"][0]["colors"]
    named = {tuple(c["color"]) for c in colors}
    assert len(colors) == len(p.scene.parts()) and len(named) == len(colors)
    ids = dict(answer.images)[FieldType.IDS_IMAGE]
    assert {tuple(int(v) for v in c) for c in ids[..., :3].reshape(-1, 3)} <= named
    assert _same_everywhere(p.answer({"action": "Pass"}))["agents"][0]["colors"] is None
    # Initialize's setting: every answer with images, none without.
    md = _same_everywhere(p.answer({"action": "Initialize", "renderInstanceSegmentation": True, "agentCount": 2}))
    assert [len(a["colors"]) for a in md["agents"]] == [len(colors)] * 2
    md = _same_everywhere(p.answer({"action": "Pass", "renderImage": False}))
    assert [a["colors"] for a in md["agents"]] == [None, None]
    md = _same_everywhere(p.answer({"action": "RotateLeft"}))
    assert [len(a["colors"]) for a in md["agents"]] == [len(colors)] * 2


def test_an_agent_manager_action_sends_colors_as_initialize_left_them():
    # A step's renderInstanceSegmentation has no effect on the AgentManager's own actions: no image, no list.
    p = Player(width=16, height=12)
    answer = p.answer({"action": "ChangeResolution", "x": 20, "y": 10, "renderInstanceSegmentation": True})
    assert FieldType.IDS_IMAGE not in _kinds(answer) and _same_everywhere(answer)["agents"][0]["colors"] is None


def test_a_player_without_graphics_sends_no_colors():
    p = Player(width=16, height=12, headless=True)
    md = _same_everywhere(p.answer({"action": "Initialize", "renderInstanceSegmentation": True}))
    assert md["agents"][0]["lastActionSuccess"] and md["agents"][0]["colors"] is None


def test_the_wire_carries_colors_with_the_ids_field(spawn):
    p = spawn(["-screen-width", "16", "-screen-height", "12"])
    first = p.recv_message()
    assert msgpack.unpackb(bytes(first.first(FieldType.METADATA)))["agents"][0]["colors"] is None
    p.open_client()
    p.send({"action": "Pass", "renderInstanceSegmentation": True})
    message = p.recv_message()
    assert [kind for kind, _ in message.fields] == [FieldType.METADATA, FieldType.RGB_IMAGE, FieldType.IDS_IMAGE]
    assert msgpack.unpackb(bytes(message.first(FieldType.METADATA)))["agents"][0]["colors"]

"""Answers built from the per-state cache: the same metadata as built from scratch, packed byte for byte as
msgpack packs the dict (and as JSON as json.dumps writes it), and static frames that follow the protocol
(sequenceId echoed, lastAction right)."""

from __future__ import annotations

import json
import random

import msgpack
import numpy as np
import pytest

from renderd.player.core import VIEW_CACHE_SIZE, Player
from renderd.protocol import FieldType, encode_metadata

#: A walk through every kind of answer: state changes, no-ops, failures, action returns, cameras, resets.
ACTIONS = [
    {"action": "Initialize", "renderDepthImage": True, "visibilityDistance": 3.0},
    {"action": "Pass"},
    {"action": "MoveAhead"},
    {"action": "MoveAhead", "moveMagnitude": 0.5},
    {"action": "RotateRight"},
    {"action": "LookDown"},
    {"action": "Pass", "sequenceId": 100},
    {"action": "LookDown", "degrees": 90},  # fails: beyond the limit
    {"action": "GetReachablePositions"},  # a large actionReturn
    {"action": "GetScenesInBuild"},
    {"action": "AddThirdPartyCamera", "position": {"x": 1, "y": 2, "z": 0}, "rotation": {"x": 30, "y": 0, "z": 0}},
    {"action": "UpdateThirdPartyCamera", "thirdPartyCameraId": 0, "fieldOfView": 60},
    {"action": "Pass"},
    {"action": "Teleport", "position": {"x": 1.0, "y": 0.9, "z": -1.0}, "rotation": {"x": 0, "y": 270, "z": 0}},
    {"action": "Initialize", "fieldOfView": 70},
    {"action": "ChangeResolution", "x": 48, "y": 24},
    {"action": "NoSuchAction"},
    {"action": "Schritt\u2192vorwärts"},  # not ASCII: in lastAction and errorMessage
    {"action": "Pass", "agentId": 3},
    {"sequenceId": 7},
    {"action": "Reset", "sceneName": "FloorPlan2_physics"},
    {"action": "Pass"},
    {"action": "Reset", "sceneName": "FloorPlan2"},
    {"action": "RotateLeft", "degrees": 45},
    {"action": "Done"},
]


def _walk(seed: int, steps: int = 120) -> list[dict]:
    rng = random.Random(seed)
    return [dict(rng.choice(ACTIONS)) for _ in range(steps)]


@pytest.mark.parametrize("static_frame", [False, True])
@pytest.mark.parametrize("seed", [1, 2])
def test_cached_answers_equal_answers_built_from_scratch(static_frame, seed):
    cached = Player(width=32, height=24, static_frame=static_frame, metadata_objects=3)
    fresh = Player(width=32, height=24, static_frame=static_frame, metadata_objects=3)
    for action in [{"action": "Pass"}, *ACTIONS, *_walk(seed)]:
        fresh._views.clear()  # every answer from scratch
        fresh._image_list_key = None
        a = cached.answer(dict(action))
        b = fresh.answer(dict(action))
        assert a.metadata() == b.metadata(), action
        assert [t for t, _ in a.images] == [t for t, _ in b.images], action
        assert all(np.array_equal(x, y) for (_, x), (_, y) in zip(a.images, b.images)), action
        assert len(cached._views) <= VIEW_CACHE_SIZE


@pytest.mark.parametrize("objects", [0, 100])
def test_packed_and_json_metadata_are_what_msgpack_and_json_make_of_the_dict(objects):
    p = Player(width=32, height=24, metadata_objects=objects)
    answers = [p.first_answer(), p.rejected_answer({"action": "Pass", "sequenceId": 2**40}, "no", "InvalidArgument")]
    answers += [p.answer(dict(action)) for action in [*ACTIONS, *_walk(3, 40)]]
    answers.append(p.answer({"action": "Pass", "sequenceId": -5}))
    for answer in answers:
        metadata = answer.metadata()
        packed = answer.packed_metadata()
        assert packed == encode_metadata(metadata)  # byte for byte
        assert msgpack.unpackb(packed, raw=False, strict_map_key=False) == metadata
        text = answer.json_metadata()
        assert text == json.dumps(metadata, separators=(",", ":")).encode("utf-8")  # as the HTTP link sends it
        assert json.loads(text) == metadata


def test_handle_returns_a_fresh_top_level_each_time():
    p = Player(width=16, height=16)
    first, _ = p.handle({"action": "Pass"})
    first["sequenceId"] = -1
    first["agents"][0]["lastAction"] = "scribbled"
    second, _ = p.handle({"action": "Pass"})
    assert second["sequenceId"] == 2 and second["agents"][0]["lastAction"] == "Pass"


def test_an_unchanged_rendered_view_reuses_its_image_list():
    p = Player(width=32, height=32)
    a = p.answer({"action": "Pass"})
    assert p.answer({"action": "Pass"}).images is a.images
    assert p.answer({"action": "Pass", "renderDepthImage": True}).images is not a.images
    moved = p.answer({"action": "RotateRight"})
    assert moved.images is not a.images and not np.array_equal(moved.images[0][1], a.images[0][1])


def test_an_unchanged_state_reuses_its_view():
    p = Player(width=32, height=32, static_frame=True)
    a = p.answer({"action": "Pass"})
    b = p.answer({"action": "Pass"})
    c = p.answer({"action": "MoveAhead", "moveMagnitude": 5.0})  # blocked: nothing moves
    assert a._view is b._view is c._view
    d = p.answer({"action": "RotateRight"})
    assert d._view is not a._view
    assert p.answer({"action": "RotateLeft"})._view is a._view  # back where it was: still cached


def test_static_frames_echo_the_action():
    p = Player(width=40, height=30, static_frame=True, platform="Linux64")
    p.first_answer()
    frame = None
    for seq, action in enumerate(["Pass", "MoveAhead", "RotateRight", "NoSuchAction", "Pass"], start=1):
        answer = p.answer({"action": action, "sequenceId": seq * 10})
        md = msgpack.unpackb(answer.packed_metadata(), raw=False)
        agent = md["agents"][0]
        assert md["sequenceId"] == seq * 10
        assert agent["lastAction"] == action
        assert agent["lastActionSuccess"] is (action != "NoSuchAction")
        assert (agent["errorCode"] == "InvalidAction") is (action == "NoSuchAction")
        rgb = dict(answer.images)[FieldType.RGB_IMAGE]
        assert frame is None or rgb is frame  # the same precomputed frame every step
        frame = rgb
    assert md["agents"][0]["agent"]["rotation"]["y"] == 90  # the metadata follows the actions

"""Events decode their metadata on first access; building them reads only what they need."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from renderd.errors import ProtocolError
from renderd.event import FrameAssembler
from renderd.protocol import Decoder, FieldType, encode_message, encode_metadata

W, H = 4, 3


def message(fields):
    d = Decoder()
    d.receive_data(b"".join(bytes(memoryview(b).cast("B")) for b in encode_message(fields)))
    return d.next_message()


def agent(**kw):
    a = {"screenWidth": W, "screenHeight": H, "lastAction": "Pass", "lastActionSuccess": True, "errorMessage": ""}
    a.update(kw)
    return a


def rgb(value=7):
    return np.full(W * H * 3, value, np.uint8)


def test_metadata_equals_a_full_decode():
    objects = [{"objectId": f"Box|{i}", "position": {"x": i * 0.5, "y": 0.0, "z": 1.0}} for i in range(200)]
    md = {"agents": [agent(objects=objects)], "sequenceId": 4, "activeAgentId": 0, "thirdPartyCameras": []}
    body = encode_metadata(md)
    ev = FrameAssembler().event(message([(FieldType.METADATA, body), (FieldType.RGB_IMAGE, rgb())]))
    assert ev.sequence_id == 4 and bool(ev) and (ev.screen_width, ev.screen_height) == (W, H)
    assert "lastAction='Pass'" in repr(ev)
    assert ev.metadata == msgpack.unpackb(body, raw=False)["agents"][0]
    assert ev.metadata is ev.metadata  # decoded once
    ev.metadata["lastActionSuccess"] = False  # a decoded map is the user's to change, as before
    assert not ev


def test_what_the_event_does_not_need_is_decoded_on_first_access():
    bad_string = b"\xa2\xff\xfe"  # a 2-byte msgpack str that is not UTF-8: only a full decode notices
    md = encode_metadata({"agents": [agent(note="PLACEHOLDER")], "sequenceId": 1, "activeAgentId": 0})
    body = md.replace(msgpack.packb("PLACEHOLDER"), bad_string)
    ev = FrameAssembler().event(message([(FieldType.METADATA, body), (FieldType.RGB_IMAGE, rgb())]))
    assert bool(ev) and ev.frame.shape == (H, W, 3)
    # The summary fields come from the scan: reading them does not decode the rest.
    assert (ev.last_action, ev.error_message) == ("Pass", "")
    with pytest.raises(ProtocolError, match="not valid msgpack"):
        ev.metadata


def test_last_action_and_error_message_follow_the_metadata():
    md = {"agents": [agent(lastActionSuccess=False, errorMessage="blocked by a wall", lastAction="MoveAhead")],
          "sequenceId": 2, "activeAgentId": 0}
    ev = FrameAssembler().event(message([(FieldType.METADATA, encode_metadata(md)), (FieldType.RGB_IMAGE, rgb())]))
    assert not ev and (ev.last_action, ev.error_message) == ("MoveAhead", "blocked by a wall")
    md["agents"][0].update(errorMessage=None, lastAction=3)  # what a player may send: read as none
    ev = FrameAssembler().event(message([(FieldType.METADATA, encode_metadata(md)), (FieldType.RGB_IMAGE, rgb())]))
    assert (ev.last_action, ev.error_message) == (None, "")


@pytest.mark.parametrize(
    "body, match",
    [
        (msgpack.packb([1, 2]), "must be a msgpack map"),
        (encode_metadata({"agents": [agent()], "sequenceId": 0}) + b"\x01", "not valid msgpack"),
        (encode_metadata({"agents": {"0": agent()}, "sequenceId": 0}), "no 'agents' list"),
        (encode_metadata({"agents": [5], "sequenceId": 0}), "agents\\[0\\] is int"),
        (encode_metadata({"agents": [agent()], "sequenceId": 0})[:-3], "not valid msgpack"),
    ],
)
def test_malformed_structure_is_still_an_error_from_event(body, match):
    with pytest.raises(ProtocolError, match=match):
        FrameAssembler().event(message([(FieldType.METADATA, body)]))


def test_several_agents_share_one_decode_and_patches_still_merge():
    md = {"agents": [agent(x=0), agent(x=1)], "sequenceId": 1, "activeAgentId": 1, "thirdPartyCameras": []}
    fa = FrameAssembler()
    ev = fa.event(message([(FieldType.METADATA, encode_metadata(md)), (FieldType.RGB_IMAGE, rgb(1)),
                           (FieldType.RGB_IMAGE, rgb(2))]))
    assert ev.metadata["x"] == 1 and ev.events[0].metadata["x"] == 0
    assert (ev.frame == 2).all() and (ev.events[0].frame == 1).all()
    patched = fa.event(message([(FieldType.METADATA_PATCH, encode_metadata({"agentId": 0, "x": 10}))]), 2)
    assert patched.metadata["x"] == 10 and patched.events[1].metadata["x"] == 1
    assert ev.events[0].metadata["x"] == 0  # the earlier event is not changed by the patch
    assert fa.metadata["agents"][0]["x"] == 10


def test_patch_right_after_an_undecoded_message():
    fa = FrameAssembler()
    first = fa.event(message([(FieldType.METADATA, encode_metadata({"agents": [agent(y=3)], "sequenceId": 0}))]))
    ev = fa.event(message([(FieldType.METADATA_PATCH, encode_metadata({"agentId": 0, "lastAction": "X"}))]), 1)
    assert ev.metadata["y"] == 3 and ev.metadata["lastAction"] == "X" and ev.sequence_id == 1
    assert first.metadata["lastAction"] == "Pass"

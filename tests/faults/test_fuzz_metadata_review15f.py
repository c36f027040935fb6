"""Fuzzing what building an event leaves for later: the full decode of METADATA happens on first access of
``event.metadata`` (docs/protocol.md), so a mutated metadata body inside intact framing must raise only
ProtocolError there too, for every agent's event and for a METADATA_PATCH merged into it. Also every
truncation point of a whole message. (Guard tests: this held already.)"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from renderd.errors import ProtocolError
from renderd.event import FrameAssembler
from renderd.protocol import NEED_DATA, Decoder, FieldType, encode_message, encode_metadata

W, H = 4, 3


def _agent(i: int) -> dict:
    return {
        "screenWidth": W, "screenHeight": H, "lastAction": "MoveAhead", "lastActionSuccess": True,
        "errorMessage": "", "actionReturn": [[0.25, -1.5], {"x": 1.0}], "depthFormat": "Meters",
        "agent": {"position": {"x": 0.25 * i, "y": 0.9, "z": -1.5}, "rotation": {"x": 0.0, "y": 90.0, "z": 0.0}},
        "objects": [{"objectId": f"Fridge|+00.00|+00.90|+01.{i:02d}", "visible": True, "distance": 1.25,
                     "axisAlignedBoundingBox": {"cornerPoints": [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]}}],
        "colors": [{"name": "Fridge", "color": [10, 20, 30]}],
    }


METADATA = encode_metadata({"agents": [_agent(0), _agent(1)], "sequenceId": 1, "activeAgentId": 1,
                            "thirdPartyCameras": []})
PATCH = encode_metadata({"agentId": 0, "lastAction": "Pass", "errorMessage": "", "sequenceId": 2})
RGB = np.arange(W * H * 3, dtype=np.uint8)


def _bytes(fields) -> bytes:
    return b"".join(bytes(memoryview(b).cast("B")) for b in encode_message(fields))


def _message(metadata: bytes) -> bytes:
    return _bytes([(FieldType.METADATA, metadata), (FieldType.RGB_IMAGE, RGB), (FieldType.RGB_IMAGE, RGB)])


VALID = _message(METADATA)
PATCH_MESSAGE = _bytes([(FieldType.METADATA_PATCH, PATCH)])


def _read_all(data: bytes) -> None:
    d = Decoder(max_body_size=1 << 20)
    fa = FrameAssembler()
    d.receive_data(data)
    while (m := d.next_message()) is not NEED_DATA:
        for event in fa.event(m).events:
            md = event.metadata
            assert isinstance(md, dict)
    d.end_of_input()


def test_the_valid_messages_decode():
    _read_all(VALID + PATCH_MESSAGE)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(METADATA) - 1), st.integers(0, 255)), min_size=1, max_size=6),
       st.booleans())
def test_a_mutated_metadata_body_raises_only_protocol_error_when_read(flips, with_patch):
    body = bytearray(METADATA)
    for pos, value in flips:
        body[pos] = value
    data = _message(bytes(body)) + (PATCH_MESSAGE if with_patch else b"")
    try:
        _read_all(data)
    except ProtocolError as exc:
        assert exc.offset is not None, exc


def test_every_truncation_point_of_a_message_is_a_protocol_error_naming_the_end_of_input():
    for cut in range(1, len(VALID)):
        d = Decoder()
        d.receive_data(VALID[:cut])
        assert d.next_message() is NEED_DATA, cut
        try:
            d.end_of_input()
        except ProtocolError as exc:
            assert "end of input" in str(exc) and 0 <= exc.offset < cut, (cut, str(exc))
        else:
            raise AssertionError(f"a message cut after {cut} of {len(VALID)} bytes was taken as whole")

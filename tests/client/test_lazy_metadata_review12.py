"""Metadata whose flaw only a full decode finds (the event scan skips it) is reported on first access of
``event.metadata`` and by the next METADATA_PATCH step, each saying where and why then."""

from __future__ import annotations

import sys
import time

import msgpack
import pytest

import renderd
from renderd.errors import CallOrderError, ProtocolError
from renderd.event import FrameAssembler
from renderd.protocol import Decoder, FieldType, encode_message
from renderd.client import SessionState

W, H = 4, 2
_AGENT = {"screenWidth": W, "screenHeight": H, "lastAction": "Pass", "lastActionSuccess": True, "errorMessage": ""}

# What a structural scan cannot see, each in a key no event reads.
FLAWS = {
    "a string that is not UTF-8": b"\xa2\xff\xfe",
    "a timestamp extension of 2 bytes": b"\xd5\xff\x00\x01",
    "a map used as a map key": b"\x81\x80\x01",
}


def _metadata(flaw: bytes, seq: int = 0) -> bytes:
    return b"\x83" + msgpack.packb("sequenceId") + msgpack.packb(seq) + msgpack.packb("agents") + \
        msgpack.packb([_AGENT]) + msgpack.packb("junk") + flaw


def _messages(*fields_lists):
    d = Decoder()
    for fields in fields_lists:
        d.receive_data(b"".join(bytes(memoryview(b).cast("B")) for b in encode_message(fields)))
    return [d.next_message() for _ in fields_lists]


@pytest.mark.parametrize("flaw", list(FLAWS))
def test_a_flaw_the_scan_skips_is_reported_on_first_access_and_by_the_next_patch(flaw):
    rgb = bytes(range(W * H * 3))
    first, patch = _messages(
        [(FieldType.METADATA, _metadata(FLAWS[flaw])), (FieldType.RGB_IMAGE, rgb)],
        [(FieldType.METADATA_PATCH, msgpack.packb({"agentId": 0, "lastAction": "MoveAhead"}))],
    )
    fa = FrameAssembler()
    event = fa.event(first)  # built: what it needs is sound
    assert event.frame.shape == (H, W, 3) and event.sequence_id == 0 and event.last_action == "Pass"
    for _ in range(2):  # every access says so
        with pytest.raises(ProtocolError) as info:
            event.metadata
        e = info.value
        assert str(e).startswith("METADATA body is not valid msgpack")
        assert "found on first access of event.metadata" in str(e) and "session is not broken" in str(e)
        assert str(e).endswith(f"(at byte offset {first.offset})")
        assert e.offset == first.offset and e.field_type == FieldType.METADATA
    assert event.frame[0, 0].tolist() == list(rgb[(H - 1) * W * 3 : (H - 1) * W * 3 + 3])  # frames still valid
    with pytest.raises(ProtocolError) as info:
        fa.event(patch, 1)
    e = info.value
    assert str(e).startswith("METADATA body is not valid msgpack")
    assert f"found when the METADATA_PATCH at byte offset {patch.offset} was to be merged into it" in str(e)
    assert e.offset == first.offset and e.field_type == FieldType.METADATA


# A player whose first frame carries a string that is not UTF-8, and which answers the next action with a patch.
_PLAYER = """
import os, sys
from renderd.protocol import NEED_DATA, Decoder, FieldType, encode_message, decode_action
import msgpack
first = bytes.fromhex(sys.argv[1])
w = os.open(os.environ["AI2THOR_FIFO_SERVER_PIPE_PATH"], os.O_WRONLY)
os.writev(w, encode_message([(FieldType.METADATA, first)]))
r = os.open(os.environ["AI2THOR_FIFO_CLIENT_PIPE_PATH"], os.O_RDONLY)
d = Decoder()
while True:
    data = os.read(r, 65536)
    if not data:
        break
    d.receive_data(data)
    m = d.next_message()
    if m is not NEED_DATA:
        action = decode_action(m)
        patch = {"agentId": 0, "lastAction": action["action"], "sequenceId": action["sequenceId"]}
        os.writev(w, encode_message([(FieldType.METADATA_PATCH, msgpack.packb(patch))]))
"""


def test_a_session_stays_usable_after_the_flaw_surfaces_and_breaks_at_the_patch(tmp_path):
    first = _metadata(FLAWS["a string that is not UTF-8"])
    session = renderd.launch(
        executable=[sys.executable, "-c", _PLAYER, first.hex()],
        width=W,
        height=H,
        platform="headless",
        start_timeout=20,
        step_timeout=10,
        log_path=str(tmp_path / "player.log"),
    )
    try:
        with pytest.raises(ProtocolError, match="found on first access of event.metadata"):
            session.last_event.metadata
        assert session.state is SessionState.READY
        started = time.monotonic()
        with pytest.raises(ProtocolError, match="was to be merged into it") as info:
            session.step("MoveAhead")
        assert time.monotonic() - started < 5  # the answer came: not a timeout
        assert info.value.offset == 0 and info.value.field_type == FieldType.METADATA
        with pytest.raises(CallOrderError, match="broken session"):
            session.step("Pass")
    finally:
        session.close()
    assert session.process.returncode is not None

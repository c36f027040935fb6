"""Review of the wire codec: a stream whose first byte already cannot start a field fails at once, the
message size limit counts the whole message, and a metadata body cut short says so."""

from __future__ import annotations

import sys
import time

import pytest

import renderd
from renderd.errors import PlayerTimeout, ProtocolError
from renderd.protocol import HEADER, HEADER_SIZE, NEED_DATA, Decoder, FieldType, encode_message
from tests.helpers.protocol_review14e import feed_readv, join

# -- an impossible type byte fails without waiting for the rest of its header ------------------------------


@pytest.mark.parametrize("mode", ["receive_data", "readv"])
@pytest.mark.parametrize("garbage", [b"\x63", b"\x00", b"H", b"\x11\x00\x00"])
def test_an_unknown_type_byte_fails_before_the_rest_of_its_header(mode, garbage):
    good = join(encode_message([(FieldType.METADATA, b"\x80")]))  # a whole message first: 11 bytes
    d = Decoder()
    with pytest.raises(ProtocolError) as info:
        if mode == "receive_data":
            d.receive_data(good + garbage)
        else:
            feed_readv(d, good + garbage, len(good) + len(garbage))
        d.next_message()  # the message before the garbage is handed out first
        d.next_message()
    e = info.value
    assert f"unknown field type {garbage[0]} (expected 1-16 or 255)" in str(e)
    assert e.offset == len(good) and e.field_type == garbage[0]
    with pytest.raises(ProtocolError) as again:  # failed for good
        d.receive_data(b"\x00" * HEADER_SIZE)
    assert again.value is e


def test_a_valid_type_byte_alone_still_waits_for_its_header():
    for ftype in (FieldType.METADATA, FieldType.THIRD_PARTY_FLOW, FieldType.END_OF_MESSAGE):
        d = Decoder()
        for byte in HEADER.pack(ftype, 0)[:-1]:
            d.receive_data(bytes([byte]))
            assert d.next_message() is NEED_DATA and d.failed is None


# A player that writes one byte that cannot start a field, then hangs without closing its pipe.
_GARBAGE_PLAYER = """
import os, time
fd = os.open(os.environ["AI2THOR_FIFO_SERVER_PIPE_PATH"], os.O_WRONLY)
os.write(fd, b"E")
time.sleep(60)
"""


def test_a_player_that_writes_one_impossible_byte_is_a_protocol_error_not_a_timeout(tmp_path):
    started = time.monotonic()
    with pytest.raises(ProtocolError) as info:
        renderd.launch(
            executable=[sys.executable, "-c", _GARBAGE_PLAYER],
            width=32,
            height=24,
            platform="headless",
            start_timeout=20,
            log_path=str(tmp_path / "player.log"),
        )
    assert not isinstance(info.value, PlayerTimeout)
    assert time.monotonic() - started < 10  # not the start timeout
    assert "unknown field type 69" in str(info.value)


# -- max_message_size is the size of a whole message, its end-of-message marker included -------------------


def _messages(data: bytes, **kw) -> list:
    d = Decoder(**kw)
    d.receive_data(data)
    out = []
    while (m := d.next_message()) is not NEED_DATA:
        out.append(m)
    return out


def test_no_message_longer_than_max_message_size_is_accepted():
    # Four 100-byte fields (4 x 105 bytes) and the end marker make a message of 425 bytes.
    whole = join(encode_message([(FieldType.RGB_IMAGE, b"x" * 100)] * 4))
    assert len(whole) == 425
    (m,) = _messages(whole, max_body_size=200, max_message_size=425)
    assert m.nbytes == 425
    with pytest.raises(ProtocolError) as info:
        _messages(whole, max_body_size=200, max_message_size=424)
    e = info.value
    assert "message grows to 425 bytes with this RGB_IMAGE field and its end-of-message marker" in str(e)
    assert "over the limit of 424 bytes (max_message_size)" in str(e)
    assert e.offset == 3 * 105 and e.field_type == FieldType.RGB_IMAGE  # from the header of the crossing field


def test_max_message_size_must_hold_at_least_the_end_marker():
    assert Decoder(max_message_size=HEADER_SIZE).max_message_size == HEADER_SIZE
    (m,) = _messages(join(encode_message([])), max_message_size=HEADER_SIZE)  # an empty message fits exactly
    assert m.nbytes == HEADER_SIZE and not m.fields
    with pytest.raises(ValueError, match="max_message_size must be >= 5"):
        Decoder(max_message_size=HEADER_SIZE - 1)


# -- a metadata body cut short says so, not that a msgpack limit was exceeded ---------------------------


def test_metadata_cut_short_inside_a_long_array_says_it_is_cut_short():
    from renderd.event import FrameAssembler
    from renderd.protocol import encode_metadata

    whole = encode_metadata({"agents": [{"screenWidth": 2, "screenHeight": 2}], "objects": list(range(3000))})
    for cut in (60, 100):  # inside the 3000-element array's items: its count is more than the rest can hold
        d = Decoder()
        d.receive_data(join(encode_message([(FieldType.METADATA, whole[:cut])])))
        with pytest.raises(ProtocolError) as info:
            FrameAssembler().event(d.next_message())
        text = str(info.value)
        assert f"METADATA body is not valid msgpack: it is {cut} bytes, too few for the 3000-element array" in text
        assert "cut short" in text and info.value.offset == 0
        assert text.index("too few") < text.index("max_array_len")  # msgpack's own words come after


def test_a_map_announcing_more_entries_than_its_body_holds_says_so():
    from renderd.protocol import decode_metadata

    with pytest.raises(ProtocolError, match="it is 1 bytes, too few for the 1-entry map it announces"):
        decode_metadata(b"\x81", offset=3)

"""Review of the wire codec: limits that hold from a field's header alone, errors that say what and where,
and actions the encoder must refuse for what they are."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from renderd.errors import ProtocolError
from renderd.protocol import (
    END_OF_MESSAGE,
    HEADER,
    HEADER_SIZE,
    NEED_DATA,
    SCRATCH_SIZE,
    SMALL_BODY,
    Decoder,
    MAX_ACTION_DEPTH,
    ActionTooDeep,
    FieldType,
    decode_action,
    encode_action,
    decode_metadata,
    encode_message,
    encode_metadata,
    parse_action,
)


def join(buffers) -> bytes:
    return b"".join(bytes(memoryview(b).cast("B")) for b in buffers)


def field(ftype: int, body: bytes) -> bytes:
    return HEADER.pack(ftype, len(body)) + body


def feed_readv(decoder: Decoder, data: bytes, chunk: int) -> None:
    """Feed through get_buffers / buffers_updated, as the FIFO transport does."""
    pos = 0
    while pos < len(data):
        want = min(chunk, len(data) - pos)
        got = 0
        for buf in decoder.get_buffers():
            n = min(buf.nbytes, want - got)
            buf[:n] = data[pos + got : pos + got + n]
            got += n
            if got == want:
                break
        decoder.buffers_updated(got)
        pos += got


# -- max_fields holds from the header of the field that crosses it ------------------------------------


@pytest.mark.parametrize("length", [0, 10, SMALL_BODY + 1, 1 << 20])
def test_a_field_past_max_fields_is_refused_from_its_header(length):
    # Two fields are allowed; the third one's header alone must be refused: its body (a megabyte here)
    # is never allocated or waited for.
    d = Decoder(max_fields=2)
    d.receive_data(field(FieldType.METADATA, b"\x80") + field(FieldType.RGB_IMAGE, b"x"))
    header_offset = 2 * HEADER_SIZE + 2
    with pytest.raises(ProtocolError, match="more than 2 fields") as info:
        d.receive_data(HEADER.pack(FieldType.DEPTH_IMAGE, length))
    assert info.value.offset == header_offset
    assert info.value.field_type == FieldType.DEPTH_IMAGE
    assert d.failed is info.value
    assert d._body is None  # no body buffer was set up for it


def test_exactly_max_fields_then_the_end_marker_is_a_message():
    d = Decoder(max_fields=3)
    data = join(encode_message([(FieldType.METADATA, b"\x80"), (FieldType.RGB_IMAGE, b"a"), (FieldType.RGB_IMAGE, b"")]))
    for chunk in (1, 5, len(data)):
        d = Decoder(max_fields=3)
        feed_readv(d, data, chunk)
        m = d.next_message()
        assert m and len(m.fields) == 3
        assert d.next_message() is NEED_DATA


# -- a stream cut anywhere says what was cut, which field, and where -----------------------------------


def _eof_error(data: bytes) -> ProtocolError:
    d = Decoder()
    d.receive_data(data)
    with pytest.raises(ProtocolError) as info:
        d.end_of_input()
    return info.value


@pytest.mark.parametrize("cut", [1, 2, 3, 4])
@pytest.mark.parametrize(
    "ftype, name", [(FieldType.METADATA, "METADATA field"), (FieldType.DEPTH_IMAGE, "DEPTH_IMAGE field"),
                    (FieldType.END_OF_MESSAGE, "end-of-message marker")]
)
def test_a_cut_inside_a_header_names_the_field_its_type_byte_announces(cut, ftype, name):
    before = field(FieldType.METADATA, b"\x80")  # a whole field first: the header starts at byte 6
    e = _eof_error(before + HEADER.pack(ftype, 0)[:cut])
    assert f"inside a field header: got {cut} of 5 bytes" in str(e)
    assert name in str(e)
    assert e.field_type == ftype
    assert e.offset == len(before)


def test_a_cut_inside_a_header_with_an_unknown_type_byte_says_so():
    e = _eof_error(b"\x63\x00")
    assert "inside a field header: got 2 of 5 bytes" in str(e) and "99" in str(e) and "not a field type" in str(e)
    assert e.offset == 0


def test_a_cut_between_fields_says_where_input_ended_and_after_which_field():
    data = field(FieldType.METADATA, b"\x80") + field(FieldType.RGB_IMAGE, b"abc") + field(FieldType.DEPTH_IMAGE, b"")
    e = _eof_error(data)
    text = str(e)
    assert "inside a message: 3 field(s) received, no end-of-message marker" in text
    assert f"input ended at byte offset {len(data)}" in text
    assert "after the DEPTH_IMAGE field at byte offset 14" in text
    assert e.field_type == FieldType.DEPTH_IMAGE
    assert e.offset == 0  # the message's first byte, as for every error about a message


def test_a_cut_between_fields_after_a_large_body_counts_the_body():
    body = bytes(SMALL_BODY + 1)
    data = join(encode_message([(FieldType.METADATA, b"\x80")])) + field(FieldType.METADATA, b"\x80") + field(
        FieldType.RGB_IMAGE, body
    )
    for chunk in (7, SCRATCH_SIZE, len(data)):
        d = Decoder()
        feed_readv(d, data, chunk)
        assert d.next_message()
        with pytest.raises(ProtocolError) as info:
            d.end_of_input()
        assert f"input ended at byte offset {len(data)}" in str(info.value)
        assert "after the RGB_IMAGE field at byte offset 17" in str(info.value)
        assert info.value.offset == 11


# -- numpy scalars whose item() is a numpy scalar again ---------------------------------------------------


def _action_body(action) -> bytes:
    buffers = encode_action(action)
    return bytes(buffers[1])


@pytest.mark.parametrize(
    "value, sent",
    [
        (np.longdouble(1.5), 1.5),
        (np.array([0.25, 2], dtype=np.longdouble), [0.25, 2.0]),
        (np.longdouble("inf"), float("inf")),
    ],
    ids=["scalar", "array", "inf"],
)
def test_a_longdouble_is_sent_as_a_number(value, sent):
    # Its item() is the numpy scalar itself: the encoder asked again and again until it ran out of stack,
    # and the action was refused as nested too deeply.
    assert parse_action(_action_body({"action": "Teleport", "x": value}))["x"] == sent


def test_a_clongdouble_is_refused_as_what_it_is():
    with pytest.raises(ValueError, match="clongdouble") as info:
        encode_action({"action": "Teleport", "x": np.clongdouble(1 + 2j)})
    assert "deep" not in str(info.value)


def test_metadata_with_a_longdouble_packs_as_a_float():
    assert decode_metadata(encode_metadata({"x": np.longdouble(0.5), "y": np.ones(2, np.longdouble)})) == {
        "x": 0.5,
        "y": [1.0, 1.0],
    }


# -- an action nested too deeply says where it was, as every other bad action does ------------------------


@pytest.mark.parametrize("levels", [MAX_ACTION_DEPTH + 1, 100_000], ids=["over the limit", "past the parser"])
def test_an_action_too_deep_carries_its_offset(levels):
    body = b'{"action":"Pass","x":' + b"[" * levels + b"]" * levels + b"}"
    first = join(encode_action({"action": "Pass"}))
    d = Decoder()
    d.receive_data(first + field(FieldType.ACTION, body) + END_OF_MESSAGE)
    decode_action(d.next_message())
    with pytest.raises(ActionTooDeep) as info:
        decode_action(d.next_message())
    assert info.value.offset == len(first)
    assert f"(at byte offset {len(first)})" in str(info.value)
    with pytest.raises(ActionTooDeep) as info:
        parse_action(body, offset=7)
    assert info.value.offset == 7


# -- malformed metadata says what is wrong with it --------------------------------------------------------


@pytest.mark.parametrize(
    "body, says",
    [
        (b"\x81\xa1a" + b"\x91" * 100_000 + b"\xc0", "nested"),  # arrays in arrays, deeper than msgpack goes
        (b"\xc1", "format"),  # a byte msgpack never uses
    ],
    ids=["too deep", "reserved byte"],
)
def test_metadata_msgpack_refuses_with_no_text_still_says_what(body, says):
    with pytest.raises(ProtocolError) as info:
        decode_metadata(body, offset=3, ftype=FieldType.METADATA_PATCH)
    text = str(info.value)
    assert "METADATA_PATCH body is not valid msgpack" in text and says in text.lower()
    assert ": )" not in text
    assert info.value.offset == 3 and info.value.field_type == FieldType.METADATA_PATCH

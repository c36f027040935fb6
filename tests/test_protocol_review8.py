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
    MAX_ACTION_DEPTH,
    NEED_DATA,
    SCRATCH_SIZE,
    SMALL_BODY,
    ActionTooDeep,
    Decoder,
    FieldType,
    decode_action,
    decode_metadata,
    encode_action,
    encode_message,
    encode_metadata,
    parse_action,
)
from tests.helpers.protocol_review14e import feed_readv, join


def field(ftype: int, body: bytes) -> bytes:
    return HEADER.pack(ftype, len(body)) + body




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
    # The unknown type byte fails as soon as it arrives, before the input ends; the end then raises the same.
    d = Decoder()
    with pytest.raises(ProtocolError) as info:
        d.receive_data(b"\x63\x00")
    e = info.value
    assert "unknown field type 99" in str(e)
    assert e.offset == 0
    with pytest.raises(ProtocolError) as again:
        d.end_of_input()
    assert again.value is e


def test_a_cut_between_fields_says_where_input_ended_and_after_which_field():
    data = field(FieldType.METADATA, b"\x80") + field(FieldType.RGB_IMAGE, b"abc") + field(FieldType.DEPTH_IMAGE, b"")
    e = _eof_error(data)
    text = str(e)
    assert "3 fields received, no end-of-message marker" in text
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


# -- boundary lengths, split at every offset, against a plain reading of the framing ----------------------

BOUNDARY_LENGTHS = [0, 1, SMALL_BODY - 1, SMALL_BODY, SMALL_BODY + 1, SCRATCH_SIZE - HEADER_SIZE, SCRATCH_SIZE]


def reference_read(data: bytes) -> list[list[tuple[int, bytes]]]:
    """The framing read the plain way (header, body, until the end marker): what a decoder must agree with."""
    messages, fields, pos = [], [], 0
    while pos < len(data):
        t, n = HEADER.unpack_from(data, pos)
        pos += HEADER_SIZE
        if t == FieldType.END_OF_MESSAGE:
            messages.append(fields)
            fields = []
            continue
        fields.append((t, data[pos : pos + n]))
        pos += n
    assert not fields and pos == len(data)
    return messages


def decoded(d: Decoder) -> list[list[tuple[int, bytes]]]:
    out = []
    while (m := d.next_message()) is not NEED_DATA:
        out.append([(int(t), bytes(memoryview(b).cast("B"))) for t, b in m.fields])
    return out


@pytest.mark.parametrize("length", BOUNDARY_LENGTHS)
def test_a_body_of_a_boundary_length_split_in_two_anywhere_comes_out_whole(length):
    body = bytes(range(256)) * (length // 256) + bytes(range(length % 256))
    data = join(encode_message([(FieldType.METADATA, b"\x80"), (FieldType.RGB_IMAGE, body)])) * 2
    expect = reference_read(data)
    # every cut in the first message's headers and near the body's ends; a stride through the rest
    cuts = set(range(40)) | set(range(len(data) // 2 - 40, len(data) // 2 + 40)) | set(range(0, len(data), 997))
    for cut in sorted(c for c in cuts if 0 < c < len(data)):
        for readv in (False, True):
            d = Decoder(max_body_size=max(length, 1), max_message_size=1 << 20)
            for part in (data[:cut], data[cut:]):
                if readv:
                    feed_readv(d, part, len(part))
                else:
                    d.receive_data(part)
            d.end_of_input()
            assert decoded(d) == expect, (cut, readv)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.sampled_from([1, 2, 4, 5, 12, 16]), st.sampled_from(BOUNDARY_LENGTHS[:5] + [70_000])),
                 max_size=4),
        min_size=1,
        max_size=3,
    ),
    st.lists(st.integers(1, 80_000), min_size=1, max_size=6),
)
def test_streams_of_boundary_bodies_agree_with_the_plain_reading(messages, chunks):
    data = b"".join(join(encode_message([(t, bytes([t]) * n) for t, n in fields])) for fields in messages)
    d = Decoder()
    pos, i = 0, 0
    while pos < len(data):
        n = chunks[i % len(chunks)]
        feed_readv(d, data[pos : pos + n], n)
        pos += n
        i += 1
    d.end_of_input()
    assert decoded(d) == reference_read(data)


def test_the_largest_allowed_body_is_taken_and_one_byte_more_refused_from_its_header():
    for length in (SMALL_BODY, SMALL_BODY + 1, SCRATCH_SIZE):
        d = Decoder(max_body_size=length)
        d.receive_data(field(FieldType.RGB_IMAGE, bytes(length)) + END_OF_MESSAGE)
        assert len(d.next_message().fields[0][1]) == length
        d = Decoder(max_body_size=length - 1)
        with pytest.raises(ProtocolError, match=f"body of {length} bytes, over the limit of {length - 1}") as info:
            d.receive_data(field(FieldType.RGB_IMAGE, b"")[:1] + (length).to_bytes(4, "big"))
        assert info.value.offset == 0 and info.value.field_type == FieldType.RGB_IMAGE


def test_action_too_deep_survives_a_copy_and_a_pickle():
    # Exceptions are rebuilt from their args (pickle, copy, and type(error)(error) as Gymnasium's
    # AsyncVectorEnv re-raises a worker's error): ActionTooDeep's required 'action' made that a TypeError.
    import copy
    import pickle

    with pytest.raises(ActionTooDeep) as info:
        parse_action(b'{"action":"Pass","sequenceId":4,"x":' + b"[" * 600 + b"]" * 600 + b"}", offset=9)
    error = info.value
    error.action = {"action": error.action["action"], "sequenceId": error.action["sequenceId"]}  # shallow
    for again in (copy.copy(error), pickle.loads(pickle.dumps(error))):
        assert type(again) is ActionTooDeep and str(again) == str(error)
        assert again.offset == 9 and again.action == {"action": "Pass", "sequenceId": 4}
    rebuilt = ActionTooDeep(error)
    assert str(rebuilt) == str(error) and rebuilt.action == {}

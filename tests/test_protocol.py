"""The wire codec, byte by byte: round trips fed whole, one byte at a time and in random chunks, and every
malformed input raising ProtocolError with what and where."""

from __future__ import annotations

import json
import struct
import weakref

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from renderd import protocol
from renderd.errors import ProtocolError
from renderd.protocol import (
    END_OF_MESSAGE,
    HEADER,
    MAX_ACTION_DEPTH,
    NEED_DATA,
    SMALL_BODY,
    ActionTooDeep,
    Decoder,
    FieldType,
    Message,
    byte_views,
    decode_action,
    decode_metadata,
    drop_written,
    encode_action,
    encode_message,
    encode_metadata,
    parse_action,
)
from tests.helpers.protocol_review14e import drain, feed_readv, join


def test_wire_bytes_match_the_design():
    assert END_OF_MESSAGE == b"\xff\x00\x00\x00\x00"
    assert HEADER.format == "!BI"
    out = join(encode_message([(FieldType.ACTION, b'{"action":"Pass"}')]))
    assert out == b"\x02\x00\x00\x00\x11" + b'{"action":"Pass"}' + b"\xff\x00\x00\x00\x00"


def test_encoder_does_not_copy_bodies():
    body = np.arange(100_000, dtype=np.uint8)
    bufs = encode_message([(FieldType.RGB_IMAGE, body)])
    assert len(bufs) == 3
    mv = bufs[1]
    assert np.shares_memory(np.frombuffer(mv, dtype=np.uint8), body)


def test_encode_action_handles_numpy():
    bufs = encode_action({"action": "Teleport", "x": np.float32(1.5), "pos": np.array([1, 2]), "n": np.int64(3)})
    d = Decoder()
    d.receive_data(join(bufs))
    action = decode_action(d.next_message())
    assert action == {"action": "Teleport", "x": 1.5, "pos": [1, 2], "n": 3}


def test_encode_action_rejects_unencodable():
    with pytest.raises(ValueError, match="JSON"):
        encode_action({"action": "X", "obj": object()})


def _nested(levels: int) -> list:
    """A list nested ``levels`` deep, built without recursion: ``[[...[]...]]``."""
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


def _decode_one(buffers) -> dict:
    d = Decoder()
    d.receive_data(join(buffers))
    return decode_action(d.next_message())


def test_an_action_as_deep_as_the_limit_goes_through():
    # The top-level object is one level: its value may nest MAX_ACTION_DEPTH - 1 more.
    action = {"action": "Pass", "x": _nested(MAX_ACTION_DEPTH - 1), "s": "[[[{{{" * MAX_ACTION_DEPTH}
    assert _decode_one(encode_action(action)) == action


@pytest.mark.parametrize("levels", [MAX_ACTION_DEPTH, 5_000])
def test_encode_action_refuses_an_action_nested_too_deeply(levels):
    # Refused before sending, as a ValueError whatever the depth (the JSON encoder's own RecursionError too),
    # because the player could not decode it.
    with pytest.raises(ValueError, match="nests arrays or objects .*MAX_ACTION_DEPTH"):
        encode_action({"action": "Pass", "x": _nested(levels)})


@pytest.mark.parametrize("levels", [MAX_ACTION_DEPTH, 100_000])
def test_an_action_nested_too_deeply_is_action_too_deep(levels):
    body = b'{"action":"Pass","sequenceId":4,"x":' + b"[" * levels + b"]" * levels + b"}"
    with pytest.raises(ActionTooDeep, match="nests arrays or objects") as info:
        _decode_one(encode_message([(FieldType.ACTION, body)]))
    assert isinstance(info.value, ProtocolError)
    # What the parser could follow is handed on, so a player can echo its name and sequenceId.
    if levels == MAX_ACTION_DEPTH:
        assert info.value.action["sequenceId"] == 4
    else:  # past what the parser can follow at all
        assert info.value.action == {}


def _depth(value) -> int:
    """How deep lists and dicts nest in ``value`` (the reference, without recursion)."""
    best, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            best = max(best, level)
            stack += [(x, level + 1) for x in (item.values() if isinstance(item, dict) else item)]
    return best


def _chain(levels: int, text: str) -> dict:
    value: object = text
    for _ in range(levels):
        value = [value, text]
    return {"action": "X", "v": value}


@pytest.mark.parametrize(
    "action",
    [
        # Over MAX_ACTION_DEPTH brackets in all, most of them inside strings, nested 4 deep.
        {"action": "SetObjectPoses", "objectPoses": [{"objectName": f"a[b]{{c}}{i}", "p": {"x": 1}, "r": [1, 2]}
                                                     for i in range(200)]},
        {"action": "SetObjectPoses", "objectPoses": [{"objectName": f"a\\b[{i}", "p": {"x": 1}} for i in range(300)]},
        {"action": "X", "s": ["[" * 100] * 10},
        # Deep, with brackets and quotes (escaped: backslashes in the body) inside the strings.
        _chain(600, "]]]]]"),
        _chain(600, 'a\\"]]'),
        _chain(MAX_ACTION_DEPTH - 1, "[[[["),
        _chain(530, "\u00e9"),  # escaped non-ASCII: backslashes too
    ],
    ids=["brackets-in-strings", "with-backslashes", "many-open-brackets", "deep", "deep-escaped-quote",
         "at-the-limit", "deep-non-ascii"],
)
def test_the_depth_check_ignores_brackets_inside_strings(action):
    body = json.dumps(action, separators=(",", ":")).encode()
    depth = _depth(action)
    assert body.count(b"[") + body.count(b"{") > MAX_ACTION_DEPTH  # past the quick bound: the real count runs
    assert protocol._depth_over_limit(body) == (depth if depth > MAX_ACTION_DEPTH else None)


def test_an_integer_over_the_digit_limit_is_read_as_infinity():
    # int() refuses over 4,300 digits (a ValueError that would make the action "not JSON").
    action = parse_action(b'{"action":"Pass","a":' + b"9" * 5000 + b',"b":-' + b"9" * 5000 + b',"c":12}')
    assert action == {"action": "Pass", "a": float("inf"), "b": float("-inf"), "c": 12}


def _sample_stream(n_messages=3, big=200_000):
    rng = np.random.default_rng(7)
    msgs = []
    for i in range(n_messages):
        md = {"agents": [{"screenWidth": 4, "screenHeight": 3, "i": i}], "sequenceId": i}
        fields = [
            (FieldType.METADATA, encode_metadata(md)),
            (FieldType.RGB_IMAGE, rng.integers(0, 255, 36, dtype=np.uint8)),
            (FieldType.DEPTH_IMAGE, rng.integers(0, 255, big, dtype=np.uint8)),
            (FieldType.IDS_IMAGE, b""),
        ]
        msgs.append(fields)
    data = b"".join(join(encode_message(f)) for f in msgs)
    return msgs, data


def _check(msgs, decoded):
    assert len(decoded) == len(msgs)
    pos = 0
    for fields, m in zip(msgs, decoded):
        assert m.offset == pos
        assert [t for t, _ in m.fields] == [t for t, _ in fields]
        for (_, a), (_, b) in zip(fields, m.fields):
            assert bytes(memoryview(a).cast("B")) == bytes(memoryview(b).cast("B"))
        pos += m.nbytes
    assert decode_metadata(decoded[-1].fields[0][1])["sequenceId"] == len(msgs) - 1


@pytest.mark.parametrize("mode", ["whole", "bytewise", "readv-7", "readv-65536"])
def test_round_trip(mode):
    msgs, data = _sample_stream(big=SMALL_BODY * 3 if mode == "bytewise" else 200_000)
    d = Decoder()
    if mode == "whole":
        d.receive_data(data)
    elif mode == "bytewise":
        for i in range(len(data)):
            d.receive_data(data[i : i + 1])
    else:
        feed_readv(d, data, int(mode.split("-")[1]))
    decoded = drain(d)
    d.end_of_input()
    _check(msgs, decoded)


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=70_000), min_size=1, max_size=40), readv=st.booleans())
def test_round_trip_random_chunks(cuts, readv):
    msgs, data = _sample_stream()
    d = Decoder()
    pos = 0
    i = 0
    while pos < len(data):
        n = cuts[i % len(cuts)]
        i += 1
        if readv:
            feed_readv(d, data[pos : pos + n], n)
        else:
            d.receive_data(data[pos : pos + n])
        pos += n
    decoded = drain(d)
    d.end_of_input()
    _check(msgs, decoded)


# Bodies around the small/large threshold are built from a seed (random 16 KiB strings exhaust hypothesis).
bodies = st.one_of(
    st.binary(max_size=64),
    st.builds(
        lambda n, seed: bytes((seed + i) % 256 for i in range(n)),
        st.integers(SMALL_BODY - 2, SMALL_BODY + 2),
        st.integers(0, 255),
    ),
)
field_types = st.sampled_from([t for t in FieldType if t != FieldType.END_OF_MESSAGE])


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.lists(st.tuples(field_types, bodies), max_size=5), min_size=1, max_size=4),
    st.lists(st.integers(min_value=1, max_value=20_000), min_size=1, max_size=20),
)
def test_round_trip_arbitrary_fields(messages, cuts):
    stream = b"".join(join(encode_message(m)) for m in messages)
    d = Decoder()
    pos = i = 0
    while pos < len(stream):
        n = cuts[i % len(cuts)]
        i += 1
        d.receive_data(stream[pos : pos + n])
        pos += n
    decoded = drain(d)
    d.end_of_input()
    assert [[(t, bytes(memoryview(b).cast("B"))) for t, b in m.fields] for m in decoded] == [
        [(t, bytes(b)) for t, b in m] for m in messages
    ]


def test_large_body_is_read_into_its_own_buffer():
    """The fast path hands the transport the body's final buffer: no copy of the bulk."""
    body = np.arange(300_000, dtype=np.uint32).view(np.uint8)[:1_000_000]
    data = join(encode_message([(FieldType.RGB_IMAGE, body)]))
    d = Decoder()
    bufs = d.get_buffers()
    first = 1000
    bufs[0][:first] = data[:first]
    d.buffers_updated(first)
    bufs = d.get_buffers()
    assert len(bufs) == 2  # the rest of the body, then scratch for what follows
    target = bufs[0]
    assert target.nbytes == len(body) - (first - 5)
    n = len(data) - first
    target[:] = data[first : first + target.nbytes]
    bufs[1][: n - target.nbytes] = data[first + target.nbytes :]
    d.buffers_updated(n)
    (m,) = drain(d)
    out = m.fields[0][1]
    assert isinstance(out, np.ndarray)
    assert np.shares_memory(out, np.frombuffer(target, dtype=np.uint8))
    assert out.tobytes() == body.tobytes()


def _frame_message(size: int, fill: int) -> bytes:
    return join(encode_message([(FieldType.METADATA, encode_metadata({"n": fill})),
                                (FieldType.RGB_IMAGE, bytes([fill]) * size)]))


def _one_body(decoder: Decoder, data: bytes) -> np.ndarray:
    feed_readv(decoder, data, 1 << 20)
    (message,) = drain(decoder)
    return message.first(FieldType.RGB_IMAGE)


def test_large_body_buffers_are_reused_once_nothing_holds_them():
    decoder = Decoder()
    size = SMALL_BODY * 4
    first = _one_body(decoder, _frame_message(size, 1))
    address = first.ctypes.data
    del first  # message, body and every view gone: the buffer is free again
    second = _one_body(decoder, _frame_message(size, 2))
    assert second.ctypes.data == address
    assert bytes(second) == bytes([2]) * size
    assert decoder.pooled_bytes == size


@pytest.mark.parametrize("hold", ["view", "memoryview", "message", "slice", "weakref"])
def test_a_body_still_held_is_never_overwritten(hold):
    decoder = Decoder()
    size = SMALL_BODY * 4
    feed_readv(decoder, _frame_message(size, 1), 1 << 20)
    (message,) = drain(decoder)
    body = message.first(FieldType.RGB_IMAGE)
    held = {
        "view": body.reshape(-1, 4)[::-1],  # what an Event hands out: a view of the buffer
        "memoryview": memoryview(body),
        "message": message,
        "slice": body[10:20],
        "weakref": weakref.ref(body),
    }[hold]
    del body, message
    for fill in (2, 3, 4):
        other = _one_body(decoder, _frame_message(size, fill))
        assert bytes(other) == bytes([fill]) * size
    if hold == "message":
        held = held.first(FieldType.RGB_IMAGE)
    if hold == "weakref":
        held = held()
    values = np.unique(np.asarray(held))
    assert values.tolist() == [1]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([SMALL_BODY + 1, SMALL_BODY * 2, SMALL_BODY * 3]),  # few sizes: reuse is likely
            st.sampled_from(["drop", "view", "slice", "memoryview", "message", "array"]),
            st.integers(0, 3),  # drop this many of the oldest holds first
        ),
        min_size=1,
        max_size=25,
    ),
    st.sampled_from([1 << 20, 7000, 70000]),
)
def test_pooled_buffers_never_change_under_a_holder(steps, chunk):
    """Whatever an agent keeps of a frame (in any form), later frames never overwrite it (dropped frames'
    buffers are reused meanwhile), and the pool stays within its limit."""
    decoder = Decoder(pool_bytes=SMALL_BODY * 12)
    kept: list[tuple[int, object]] = []
    for fill, (size, how, release) in enumerate(steps, start=1):
        del kept[:release]
        feed_readv(decoder, _frame_message(size, fill % 256), chunk)
        (message,) = drain(decoder)
        body = message.first(FieldType.RGB_IMAGE)
        holder = {
            "drop": None,
            "view": body.reshape(-1, 1)[::-1],
            "slice": body[5:9],
            "memoryview": memoryview(body)[3:],
            "message": message,
            "array": body,
        }[how]
        del body, message
        if holder is not None:
            kept.append((fill % 256, holder))
        for value, held in kept:
            if isinstance(held, Message):
                held = held.first(FieldType.RGB_IMAGE)
            assert np.unique(np.asarray(held)).tolist() == [value]
        assert decoder.pooled_bytes <= SMALL_BODY * 12


def test_pool_is_bounded_and_can_be_turned_off():
    size = SMALL_BODY * 4
    decoder = Decoder(pool_bytes=0)
    first = _one_body(decoder, _frame_message(size, 1))
    address = first.ctypes.data
    keep = first  # noqa: F841 - a different buffer must be used while this one lives
    del first
    assert _one_body(decoder, _frame_message(size, 2)).ctypes.data != address
    assert decoder.pooled_bytes == 0

    decoder = Decoder(pool_bytes=3 * size)
    held = [_one_body(decoder, _frame_message(size, i)) for i in range(10)]  # all in use: nothing reusable
    assert decoder.pooled_bytes <= 3 * size
    assert [bytes(h[:1]) for h in held] == [bytes([i]) for i in range(10)]
    with pytest.raises(ValueError, match="pool_bytes"):
        Decoder(pool_bytes=-1)
    decoder.release_pool()
    assert decoder.pooled_bytes == 0
    assert [bytes(h[:1]) for h in held] == [bytes([i]) for i in range(10)]  # frames still held stay valid


def test_need_data_is_falsy_and_incremental():
    d = Decoder()
    assert d.next_message() is NEED_DATA
    assert not NEED_DATA
    d.receive_data(b"\x02\x00\x00")
    assert d.next_message() is NEED_DATA
    assert d.in_message


# -- malformed input ------------------------------------------------------------------------------


def _err(data: bytes, *, eof: bool = False, **kw) -> ProtocolError:
    d = Decoder(**kw)
    with pytest.raises(ProtocolError) as info:
        d.receive_data(data)
        drain(d)
        if eof:
            d.end_of_input()
    return info.value


def test_unknown_field_type_names_type_and_offset():
    good = join(encode_message([(FieldType.ACTION, b"{}")]))
    e = _err(good + b"\x63\x00\x00\x00\x01x")
    assert "unknown field type 99" in str(e)
    assert e.offset == len(good)
    assert f"byte offset {len(good)}" in str(e)


def test_length_over_limit_rejected_before_body():
    e = _err(struct.pack("!BI", FieldType.RGB_IMAGE, 1001), max_body_size=1000)
    assert "RGB_IMAGE" in str(e) and "1001" in str(e) and "1000" in str(e)
    assert e.offset == 0


def test_default_limit_fits_4096_square_rgba_and_no_more():
    d = Decoder()
    d.receive_data(struct.pack("!BI", FieldType.RGB_IMAGE, 4096 * 4096 * 4))  # accepted: waits for the body
    assert d.next_message() is NEED_DATA
    e = _err(struct.pack("!BI", FieldType.RGB_IMAGE, 4096 * 4096 * 4 + 1))
    assert "over the limit" in str(e)


def test_eom_with_nonzero_length():
    e = _err(b"\xff\x00\x00\x00\x01")
    assert "end-of-message marker with length 1" in str(e)


@pytest.mark.parametrize(
    "data,expect",
    [
        (b"\x04\x00\x00", "inside a field header: got 3 of 5"),
        (b"\x04\x00\x00\x00\x10abc", "inside the body of a RGB_IMAGE field: expected 16 bytes, got 3"),
        (
            struct.pack("!BI", 5, 100_000) + b"x" * 50_000,
            "inside the body of a DEPTH_IMAGE field: expected 100000 bytes, got 50000",
        ),
        (
            b"\x02\x00\x00\x00\x02{}",
            "inside a message, which starts at byte offset 0: 1 field received, no end-of-message marker",
        ),
    ],
)
def test_end_of_input_inside(data, expect):
    e = _err(data, eof=True)
    assert expect in str(e)
    assert e.offset == 0


def test_end_of_input_between_messages_is_clean():
    d = Decoder()
    d.receive_data(join(encode_action({"action": "Pass"})))
    assert len(drain(d)) == 1
    d.end_of_input()


def test_decoder_stays_failed():
    d = Decoder()
    with pytest.raises(ProtocolError) as first:
        d.receive_data(b"\x63\x00\x00\x00\x00")
    for call in (lambda: d.receive_data(b"\xff\x00\x00\x00\x00"), d.next_message, d.get_buffers, d.end_of_input):
        with pytest.raises(ProtocolError) as again:
            call()
        assert again.value is first.value


def test_too_many_fields_without_end_marker():
    e = _err(b"\x02\x00\x00\x00\x00" * 11, max_fields=10)
    assert "more than 10 fields" in str(e)


def test_a_message_over_max_message_size_is_refused_from_the_crossing_header():
    # Four bodies of 100 bytes fit max_message_size=425 with their headers (4 x 105) and the end marker (5);
    # a fifth field's header crosses it, before its body is read. The count restarts with each message.
    body = b"x" * 100
    whole = join(encode_message([(FieldType.RGB_IMAGE, body)] * 4))
    d = Decoder(max_body_size=200, max_message_size=425)
    stream = whole + whole
    for i in range(len(stream)):  # a byte at a time: a header seen again while its body is missing counts once
        d.receive_data(stream[i : i + 1])
    assert len(drain(d)) == 2
    fields = join(encode_message([(FieldType.RGB_IMAGE, body)] * 4))[:-5]  # no end marker
    e = _err(fields + struct.pack("!BI", FieldType.DEPTH_IMAGE, 1), max_body_size=200, max_message_size=425)
    assert "message grows to 431 bytes with this DEPTH_IMAGE field" in str(e) and "425" in str(e)
    assert e.offset == 4 * 105 and e.field_type == FieldType.DEPTH_IMAGE
    assert Decoder(max_body_size=1000).max_message_size == 16000  # by default, sixteen of the largest bodies
    # A 4096 x 4096 RGBA agent with RGB, depth, normals, instance and class segmentation fits the default.
    assert 5 * (5 + 4096 * 4096 * 4) <= Decoder().max_message_size


def test_metadata_must_be_a_msgpack_map():
    with pytest.raises(ProtocolError, match="not valid msgpack"):
        decode_metadata(b"\xc1", offset=12)
    with pytest.raises(ProtocolError, match="must be a msgpack map, got list"):
        decode_metadata(msgpack.packb([1, 2]))
    assert decode_metadata(msgpack.packb({1: "int keys allowed"})) == {1: "int keys allowed"}


@pytest.mark.parametrize(
    "body,expect",
    [(b"\xff\xfe", "not valid UTF-8 JSON"), (b"{bad", "not valid UTF-8 JSON"), (json.dumps([1]).encode(), "JSON object")],
)
def test_bad_actions(body, expect):
    d = Decoder()
    d.receive_data(join(encode_message([(FieldType.ACTION, body)])))
    with pytest.raises(ProtocolError, match=expect):
        decode_action(d.next_message())


def test_action_message_needs_exactly_one_action():
    d = Decoder()
    d.receive_data(join(encode_message([(FieldType.ACTION, b"{}"), (FieldType.ACTION, b"{}")])))
    with pytest.raises(ProtocolError, match="exactly one ACTION field, got 2"):
        decode_action(d.next_message())


@given(st.lists(st.binary(max_size=20), max_size=6), st.lists(st.integers(0, 40), max_size=6))
def test_drop_written_leaves_exactly_the_unwritten_bytes(buffers, writes):
    """What a sequence of partial writes leaves to write is the rest of the joined bytes, in order."""
    data = b"".join(buffers)
    views = byte_views(buffers)
    assert all(v.nbytes for v in views)
    done = 0
    for n in writes:
        n = min(n, len(data) - done)
        drop_written(views, n)
        done += n
        assert b"".join(bytes(v) for v in views) == data[done:]


@pytest.mark.parametrize("mode", ["receive_data", "readv"])
@pytest.mark.parametrize("bad", [b"\x63\x00\x00\x00\x00", b"\xff\x00\x00\x00\x01", b"\x01\xff\xff\xff\xff"])
def test_whole_messages_before_malformed_bytes_are_handed_out_first(mode, bad):
    # Bytes read together: one whole message, then a malformed header. The message is not lost: it comes
    # out first, and the error is raised by the call after it (as a reader of one message at a time sees it).
    good = join(encode_message([(FieldType.METADATA, encode_metadata({"sequenceId": 1})),
                                (FieldType.RGB_IMAGE, b"\x07" * (SMALL_BODY + 10))]))
    d = Decoder()
    if mode == "receive_data":
        d.receive_data(good + bad)
    else:
        feed_readv(d, good + bad, len(good) + len(bad))
    assert d.has_message
    m = d.next_message()
    assert decode_metadata(m.first(FieldType.METADATA)) == {"sequenceId": 1}
    assert bytes(m.first(FieldType.RGB_IMAGE)) == b"\x07" * (SMALL_BODY + 10)
    with pytest.raises(ProtocolError) as first:
        d.next_message()
    assert first.value.offset == len(good)
    assert d.failed is first.value
    for call in (d.next_message, d.get_buffers, d.end_of_input, lambda: d.receive_data(b"\xff")):
        with pytest.raises(ProtocolError) as again:
            call()
        assert again.value is first.value


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=8), readv=st.booleans(),
       take_early=st.booleans())
def test_a_message_before_malformed_bytes_survives_any_chunking(cuts, readv, take_early):
    good = join(encode_message([(FieldType.METADATA, encode_metadata({"n": 1})), (FieldType.DEPTH_IMAGE, b"d" * 9)]))
    data = good + b"\x63\x00\x00\x00\x00" + good
    d = Decoder()
    got, error, pos, i = [], None, 0, 0
    while pos < len(data) and error is None:
        chunk = data[pos : pos + cuts[i % len(cuts)]]
        i += 1
        pos += len(chunk)
        try:
            if readv:
                feed_readv(d, chunk, len(chunk))
            else:
                d.receive_data(chunk)
        except ProtocolError as exc:
            error = exc
        if take_early or error is not None:
            try:
                while m := d.next_message():
                    got.append(m)
            except ProtocolError as exc:
                error = exc
    if error is None:  # the bad bytes came in the last call: the message is handed out, then the error
        got.append(d.next_message())
        with pytest.raises(ProtocolError) as info:
            d.next_message()
        error = info.value
    assert len(got) == 1 and bytes(got[0].first(FieldType.DEPTH_IMAGE)) == b"d" * 9
    assert "unknown field type 99" in str(error) and error.offset == len(good)


def test_a_failed_decoder_asked_again_and_again_does_not_grow_its_error():
    # Raising the one stored error again prepended the new frames to its traceback every time: a reader
    # polling a failed decoder built a traceback (and kept every frame on it alive) without bound.
    d = Decoder()
    with pytest.raises(ProtocolError):
        d.receive_data(b"\x63\x00\x00\x00\x00")
    for _ in range(200):
        for call in (d.next_message, d.get_buffers, lambda: d.buffers_updated(0)):
            with pytest.raises(ProtocolError) as info:
                call()
    depth, tb = 0, info.value.__traceback__
    while tb is not None:
        depth, tb = depth + 1, tb.tb_next
    assert depth < 10

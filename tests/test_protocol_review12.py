"""Review of the wire codec: a header whose first length bytes already make it impossible fails as soon as
the byte that makes it so arrives, not once (if ever) the rest of the header comes."""

from __future__ import annotations

import sys
import time

import pytest

import renderd
from renderd.errors import PlayerTimeout, ProtocolError
from renderd.protocol import (
    DEFAULT_MAX_BODY_SIZE,
    HEADER,
    HEADER_SIZE,
    NEED_DATA,
    Decoder,
    FieldType,
    encode_message,
)
from tests.helpers.protocol_review14e import feed_readv, join

# -- the big-endian length is checked byte by byte ----------------------------------------------------------


def _first_impossible_byte(length: int, limit: int) -> int | None:
    """Index (1-4) of the header byte after which no remaining bytes could bring ``length`` within ``limit``."""
    if length <= limit:
        return None
    for k in range(1, 5):
        least = (length >> (8 * (4 - k))) << (8 * (4 - k))
        if least > limit:
            return k
    raise AssertionError("unreachable")


def _feed_one_byte_at_a_time(d: Decoder, data: bytes, mode: str, messages: list | None = None) -> int | None:
    """Feed ``data`` one byte at a time; the index of the byte whose arrival raised, else None. Whole
    messages decoded on the way are appended to ``messages``."""
    for i in range(len(data)):
        try:
            if mode == "receive_data":
                d.receive_data(data[i : i + 1])
            else:
                feed_readv(d, data[i : i + 1], 1)
            m = d.next_message()
        except ProtocolError:
            return i
        if m is not NEED_DATA and messages is not None:
            messages.append(m)
    return None


LIMIT = DEFAULT_MAX_BODY_SIZE  # 0x04000000
LENGTHS = [
    0,
    1,
    LIMIT - 1,
    LIMIT,  # the largest accepted: must be waited for, byte by byte
    LIMIT + 1,  # over only by its last byte: known only from the whole header
    LIMIT + 0x100,  # over from the third length byte
    LIMIT + 0x10000,  # over from the second
    0x05000000,  # over from the first length byte
    0xFFFFFFFF,
]


@pytest.mark.parametrize("mode", ["receive_data", "readv"])
@pytest.mark.parametrize("length", LENGTHS, ids=hex)
def test_a_body_length_over_the_limit_fails_at_the_first_length_byte_that_proves_it(mode, length):
    good = join(encode_message([(FieldType.METADATA, b"\x80")]))
    d = Decoder(max_message_size=1 << 40)  # only max_body_size is in play here
    failed_at = _feed_one_byte_at_a_time(d, good + HEADER.pack(FieldType.RGB_IMAGE, length), mode)
    expected = _first_impossible_byte(length, LIMIT)
    if expected is None:
        assert failed_at is None and d.failed is None
        return
    assert failed_at == len(good) + expected
    e = d.failed
    assert e.offset == len(good) and e.field_type == FieldType.RGB_IMAGE
    assert f"over the limit of {LIMIT} bytes (max_body_size)" in str(e)
    assert "RGB_IMAGE field declares a body of" in str(e)
    if expected < 4:  # said from part of the header: the least length those bytes allow, and how it was known
        least = (length >> (8 * (4 - expected))) << (8 * (4 - expected))
        assert f"at least {least} bytes (from the first {expected} of its 4 length bytes" in str(e)
    with pytest.raises(ProtocolError) as again:  # failed for good
        d.receive_data(b"\x00")
    assert again.value is e


@pytest.mark.parametrize("mode", ["receive_data", "readv"])
@pytest.mark.parametrize("length", [0x01000000, 0x00010000, 0x00000100, 0x00000001], ids=hex)
def test_an_end_marker_with_a_length_fails_at_its_first_non_zero_length_byte(mode, length):
    d = Decoder()
    header = HEADER.pack(FieldType.END_OF_MESSAGE, length)
    failed_at = _feed_one_byte_at_a_time(d, header, mode)
    first_non_zero = next(i for i in range(1, HEADER_SIZE) if header[i])
    assert failed_at == first_non_zero
    assert "end-of-message marker with" in str(d.failed) and "expected 0" in str(d.failed)
    assert d.failed.offset == 0 and d.failed.field_type == FieldType.END_OF_MESSAGE


def test_the_message_size_limit_is_checked_from_part_of_a_header():
    # max_message_size 425: a 200-byte body (205 with its header) plus the end marker leaves room for a
    # field of at most 425 - 5 - 205 - 5 = 210 bytes; its length's high bytes already say it is larger.
    first = HEADER.pack(FieldType.METADATA, 200) + bytes([0x80]) + bytes(199)
    d = Decoder(max_body_size=1 << 20, max_message_size=425)
    failed_at = _feed_one_byte_at_a_time(d, first + HEADER.pack(FieldType.DEPTH_IMAGE, 0x100), "receive_data")
    assert failed_at == len(first) + 3  # 0x00 0x00 0x01: at least 256 bytes
    assert "at least 471 bytes" in str(d.failed) and "(max_message_size)" in str(d.failed)
    # One that still fits is waited for, and then taken.
    d = Decoder(max_body_size=1 << 20, max_message_size=425)
    whole = first + HEADER.pack(FieldType.DEPTH_IMAGE, 210) + bytes(210) + HEADER.pack(FieldType.END_OF_MESSAGE, 0)
    taken: list = []
    assert _feed_one_byte_at_a_time(d, whole, "receive_data", taken) is None
    assert [(t, len(b)) for t, b in taken[0].fields] == [(FieldType.METADATA, 200), (FieldType.DEPTH_IMAGE, 210)]


def test_a_field_past_max_fields_fails_from_its_type_byte():
    d = Decoder(max_fields=2)
    two = HEADER.pack(FieldType.METADATA, 1) + b"\x80" + HEADER.pack(FieldType.RGB_IMAGE, 0)
    failed_at = _feed_one_byte_at_a_time(d, two + HEADER.pack(FieldType.RGB_IMAGE, 0), "readv")
    assert failed_at == len(two)
    assert "more than 2 fields" in str(d.failed) and d.failed.offset == len(two)
    # The end marker is not a field: after two fields it is taken.
    d = Decoder(max_fields=2)
    taken: list = []
    assert _feed_one_byte_at_a_time(d, two + HEADER.pack(FieldType.END_OF_MESSAGE, 0), "readv", taken) is None
    assert len(taken) == 1 and len(taken[0].fields) == 2


# A player that writes the first two bytes of an RGB_IMAGE header whose length cannot be under the limit
# (0x05 followed by anything is over 64 MiB), then hangs without closing its pipe.
_STALLED_HEADER_PLAYER = """
import os, time
fd = os.open(os.environ["AI2THOR_FIFO_SERVER_PIPE_PATH"], os.O_WRONLY)
os.write(fd, bytes([4, 5]))
time.sleep(60)
"""


def test_a_player_that_stalls_after_an_impossible_length_byte_is_a_protocol_error_not_a_timeout(tmp_path):
    started = time.monotonic()
    with pytest.raises(ProtocolError) as info:
        renderd.launch(
            executable=[sys.executable, "-c", _STALLED_HEADER_PLAYER],
            width=32,
            height=24,
            platform="headless",
            start_timeout=20,
            log_path=str(tmp_path / "player.log"),
        )
    assert not isinstance(info.value, PlayerTimeout)
    assert time.monotonic() - started < 10  # not the start timeout
    assert "RGB_IMAGE field declares a body of at least 83886080 bytes" in str(info.value)


# -- metadata of many tiny maps and arrays is refused before it takes many times its size in memory ----------

import tracemalloc  # noqa: E402

import msgpack  # noqa: E402

from renderd.event import FrameAssembler  # noqa: E402
from renderd.protocol import (  # noqa: E402
    METADATA_BYTES_PER_CONTAINER,
    METADATA_UNCOUNTED_SIZE,
    decode_metadata,
)

_AGENT = {"screenWidth": 4, "screenHeight": 2, "lastAction": "Pass", "lastActionSuccess": True, "errorMessage": ""}


def _metadata_with(key: str, raw_value: bytes, *, in_agent: bool = False) -> bytes:
    """A metadata map (sequenceId 0, one agent) whose ``key`` (top-level, or the agent's) holds the msgpack
    bytes ``raw_value`` as they are."""
    agent = msgpack.packb(_AGENT)
    if in_agent:
        agent = bytes([agent[0] + 1]) + agent[1:] + msgpack.packb(key) + raw_value
        return b"\x82" + msgpack.packb("sequenceId") + b"\x00" + msgpack.packb("agents") + b"\x91" + agent
    return (b"\x83" + msgpack.packb("sequenceId") + b"\x00" + msgpack.packb("agents") + b"\x91" + agent
            + msgpack.packb(key) + raw_value)


def _array_of(items: bytes, n: int) -> bytes:
    return b"\xdd" + n.to_bytes(4, "big") + items * n


def _message(metadata: bytes):
    d = Decoder()
    d.receive_data(join(encode_message([(FieldType.METADATA, metadata)])))
    return d.next_message()


N = METADATA_UNCOUNTED_SIZE + 1000  # items of 1-3 bytes each: a body of 1-3 MiB
HOSTILE = {
    "empty arrays": (_array_of(b"\x90", N), False),
    "empty maps": (_array_of(b"\x80", N), False),
    "maps of one empty array": (_array_of(b"\x81\x01\x90", N), False),
    "in a key the event reads": (_array_of(b"\x90", N), True),  # unpacked by the scan, not skipped
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_metadata_of_tiny_containers_is_a_protocol_error_at_the_step_and_stays_small(case):
    raw, in_agent = HOSTILE[case]
    body = _metadata_with("lastAction" if in_agent else "junk", raw, in_agent=in_agent)
    message = _message(body)
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError) as info:
            FrameAssembler().event(message)  # the step's event: not deferred to event.metadata
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    e = info.value
    assert f"METADATA body of {len(body)} bytes decodes into more than {len(body) // 8} maps and arrays" in str(e)
    assert "METADATA_BYTES_PER_CONTAINER" in str(e) and "set METADATA_BYTES_PER_CONTAINER lower" in str(e)
    assert e.offset == 0 and e.field_type == FieldType.METADATA
    # Decoded without the limit it takes 64-96 times its size; refused, at most the limit's worth of it
    # (one container per 8 bytes: 8-18 times the body).
    assert peak < 20 * len(body), (peak, len(body))


def test_the_container_limit_is_one_per_8_bytes_exactly():
    assert METADATA_BYTES_PER_CONTAINER == 8
    k = 200_000
    for extra in (0, 1):  # containers: the top map, agents, the agent, the array and its k + extra items
        head = _metadata_with("junk", _array_of(b"\x90", k + extra))
        containers = 4 + k + extra
        # pad with a binary value so that the body is 8 * (4 + k) bytes, plus up to 7
        pad_key = msgpack.packb("pad")
        fixed = len(head) + len(pad_key) + 5  # bin 32 header
        pad = 8 * (4 + k) - fixed
        body = bytes([head[0] + 1]) + head[1:] + pad_key + b"\xc6" + pad.to_bytes(4, "big") + b"\x90" * pad
        assert len(body) // 8 == 4 + k and len(body) > METADATA_UNCOUNTED_SIZE
        if containers <= len(body) // 8:
            assert len(decode_metadata(body)["junk"]) == k
            FrameAssembler().event(_message(body))
        else:
            with pytest.raises(ProtocolError, match=f"more than {4 + k} maps and arrays"):
                decode_metadata(body)


def _positions(n: int) -> list:
    return [{"x": round(i * 0.25 % 40, 4), "y": 0.9009, "z": round(i // 160 * 0.25, 4)} for i in range(n)]


LEGIT = {
    # GetReachablePositions of 60,000 positions (about 2 MB, one map per 34 bytes)
    "reachable positions": {"agents": [dict(_AGENT, lastAction="GetReachablePositions", actionReturn=_positions(60_000))]},
    # bytes that could start a container but do not: a binary of them, and Cyrillic text (UTF-8 0xd0 0x90...)
    "binary of 0x90 bytes": {"agents": [_AGENT], "blob": b"\x90" * (3 * METADATA_UNCOUNTED_SIZE)},
    "cyrillic text": {"agents": [_AGENT], "names": ["\u0410\u0411\u0412\u0413" * 64] * 5000},
    # float32 points [x, z] (11 bytes each)
    "float32 points": {"agents": [dict(_AGENT, actionReturn=[[0.5, 1.5]] * 200_000)]},
}


@pytest.mark.parametrize("case", list(LEGIT))
def test_large_legitimate_metadata_still_decodes(case):
    metadata = dict(LEGIT[case], sequenceId=0)
    packer = msgpack.Packer(use_single_float=case == "float32 points", use_bin_type=True)
    body = packer.pack(metadata)
    assert len(body) > METADATA_UNCOUNTED_SIZE
    expected = msgpack.unpackb(body, raw=False)
    assert decode_metadata(body) == expected
    event = FrameAssembler().event(_message(body))
    assert event.metadata == expected["agents"][0]


# A player whose first message is well formed but whose metadata holds 4 MiB of empty arrays.
_TINY_CONTAINERS_PLAYER = """
import os, sys
from renderd.protocol import encode_message, FieldType
metadata = bytes.fromhex(sys.argv[1]) + b"\\xdd" + (1 << 22).to_bytes(4, "big") + b"\\x90" * (1 << 22)
fd = os.open(os.environ["AI2THOR_FIFO_SERVER_PIPE_PATH"], os.O_WRONLY)
for part in encode_message([(FieldType.METADATA, metadata)]):
    view = memoryview(part)
    while view:
        view = view[os.write(fd, view):]
rd = os.open(os.environ["AI2THOR_FIFO_CLIENT_PIPE_PATH"], os.O_RDONLY)
while os.read(rd, 65536):  # until the client closes its end
    pass
"""


def test_a_player_sending_metadata_of_tiny_containers_is_a_protocol_error(tmp_path):
    head = _metadata_with("junk", b"")
    started = time.monotonic()
    with pytest.raises(ProtocolError, match="METADATA_BYTES_PER_CONTAINER") as info:
        session = renderd.launch(
            executable=[sys.executable, "-c", _TINY_CONTAINERS_PLAYER, head.hex()],
            width=4,
            height=2,
            platform="headless",
            start_timeout=20,
            log_path=str(tmp_path / "player.log"),
        )
        session.close()  # (only reached when the metadata was taken)
    assert not isinstance(info.value, PlayerTimeout)
    assert time.monotonic() - started < 10

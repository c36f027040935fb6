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
from tests.test_protocol import feed_readv, join

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

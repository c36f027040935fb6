"""The decoder's buffer pool forgets the buffers of a body size no longer sent: after a change of resolution
a long session does not keep the old size's buffers (up to 64 MiB) for the rest of its life."""

from __future__ import annotations

import numpy as np

import renderd
from renderd.protocol import Decoder, FieldType, encode_message
from tests.helpers.leaks import Leaks

START = 30.0
#: Messages after which a size no longer sent must have left the pool (POOL_IDLE_MESSAGES is 64, checked
#: every 16 messages).
LATER = 100


def _frame(size: int, fill: int) -> bytes:
    parts = encode_message([(FieldType.METADATA, b"\x80"), (FieldType.RGB_IMAGE, bytes([fill]) * size)])
    return b"".join(bytes(p) for p in parts)


def _decode(decoder: Decoder, data: bytes) -> None:
    decoder.receive_data(data)
    message = decoder.next_message()
    assert message
    del message  # its buffer is free again


def test_a_size_no_longer_sent_leaves_the_pool():
    decoder = Decoder()
    big, small = 1_000_000, 40_000
    held = []
    for i in range(6):  # several big buffers at once, as when an agent keeps a few frames
        decoder.receive_data(_frame(big, i))
        held.append(decoder.next_message())
    held.clear()
    assert decoder.pooled_bytes >= 6 * big
    for i in range(LATER):
        _decode(decoder, _frame(small, i % 256))
    assert decoder.pooled_bytes < big, "buffers of a size not sent for many messages are still pooled"
    assert decoder.pooled_bytes >= small  # the size in use is still reused


def test_a_size_in_use_stays_pooled_and_is_reused():
    decoder = Decoder()
    decoder.receive_data(_frame(50_000, 1))
    first = decoder.next_message().first(FieldType.RGB_IMAGE)
    address = first.ctypes.data
    del first
    for i in range(3 * LATER):
        decoder.receive_data(_frame(50_000, i % 256))
        body = decoder.next_message().first(FieldType.RGB_IMAGE)
        assert isinstance(body, np.ndarray)
        last = body.ctypes.data
        del body
    assert last == address  # one buffer, reused throughout
    assert decoder.pooled_bytes == 50_000


def test_session_shrinking_its_resolution_lets_the_big_buffers_go():
    leaks = Leaks()
    session = renderd.launch(width=320, height=240, args=["--static-frame"], start_timeout=START)
    try:
        session.reset("FloorPlan1", renderDepthImage=True, renderInstanceSegmentation=True)
        for _ in range(5):
            session.step("Pass")
        decoder = session.channel.decoder
        big = 320 * 240 * 3
        assert max(b.nbytes for b in decoder._pool) >= big
        session.reset(width=96, height=96)
        for _ in range(LATER):
            event = session.step("Pass")
        assert event.frame.shape == (96, 96, 3)
        sizes = sorted({b.nbytes for b in decoder._pool})
        assert sizes and max(sizes) <= 96 * 96 * 4, f"pooled sizes after shrinking to 96x96: {sizes}"
    finally:
        session.close()
    leaks.check()

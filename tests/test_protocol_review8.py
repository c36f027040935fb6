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
    FieldType,
    encode_message,
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

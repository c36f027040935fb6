"""A METADATA field with an empty body is named as such, through the decoder and through an event."""

from __future__ import annotations

import pytest

from renderd.errors import ProtocolError
from renderd.event import FrameAssembler
from renderd.protocol import Decoder, FieldType, decode_metadata, encode_message


def test_an_empty_metadata_body_is_said_to_be_empty():
    for ftype in (FieldType.METADATA, FieldType.METADATA_PATCH):
        with pytest.raises(ProtocolError) as info:
            decode_metadata(b"", offset=7, ftype=ftype)
        e = info.value
        assert str(e).startswith(f"{ftype.name} body is empty (0 bytes); it must be a msgpack map"), str(e)
        assert e.offset == 7 and e.field_type == ftype


def test_a_message_whose_metadata_is_empty_fails_with_that_reason_and_where():
    d = Decoder()
    d.receive_data(b"".join(bytes(memoryview(b).cast("B")) for b in encode_message([(FieldType.METADATA, b"")])))
    message = d.next_message()
    with pytest.raises(ProtocolError) as info:
        FrameAssembler().event(message)
    assert "METADATA body is empty (0 bytes)" in str(info.value)
    assert info.value.offset == message.offset

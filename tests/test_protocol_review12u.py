"""A ProtocolError says its byte offset once: not again in parentheses when its text already names it."""

from __future__ import annotations

import pytest

from renderd.errors import ProtocolError
from renderd.protocol import HEADER_SIZE, Decoder, FieldType, encode_message, encode_metadata
from tests.helpers.protocol_review14e import drain, feed_readv, join


def _cut_message(skip: bytes = b"") -> tuple[bytes, int]:
    """``skip`` (whole messages) then a message without its end-of-message marker; the offset it starts at."""
    whole = join(encode_message([(FieldType.METADATA, encode_metadata({"a": 1})), (FieldType.ACTION_RESULT, b"x")]))
    return skip + whole[:-HEADER_SIZE], len(skip)


def test_end_of_input_inside_a_message_names_its_offset_once():
    first = join(encode_message([(FieldType.METADATA, encode_metadata({"b": 2}))]))
    data, start = _cut_message(first)
    d = Decoder()
    feed_readv(d, data, 4096)
    assert len(drain(d)) == 1
    with pytest.raises(ProtocolError) as info:
        d.end_of_input()
    text = str(info.value)
    assert info.value.offset == start
    assert text.startswith(f"end of input inside a message, which starts at byte offset {start}: 2 fields")
    assert text.count(f"byte offset {start}") == 1 and "(at byte offset" not in text
    assert text.endswith(f"after the ACTION_RESULT field at byte offset {len(data) - HEADER_SIZE - 1}")


def test_an_offset_already_said_is_not_repeated_and_another_number_is_not_mistaken_for_it():
    assert str(ProtocolError("bad at byte offset 12: x", offset=12)) == "bad at byte offset 12: x"
    assert str(ProtocolError("bad at byte offset 123", offset=12)) == "bad at byte offset 123 (at byte offset 12)"
    assert str(ProtocolError("bad", offset=9)) == "bad (at byte offset 9)"
    assert ProtocolError("bad", offset=9).inline() == "bad, at byte offset 9"
    assert ProtocolError("bad", offset=None).inline() == "bad"

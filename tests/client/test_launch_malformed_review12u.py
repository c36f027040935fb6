"""launch() whose player's first message is malformed: the error says it was the first message, of which
player, that the player was stopped, and quotes its log."""

from __future__ import annotations

import re

import pytest

import renderd
from renderd.errors import ProtocolError

from .conftest import START


def test_a_malformed_first_message_names_the_player_and_quotes_its_log(no_leaks):
    with pytest.raises(ProtocolError) as info:
        renderd.launch(["renderd-player", "--fault-at-start", "garbage"], width=32, height=24, start_timeout=START)
    err = info.value
    text = str(err)
    match = re.match(r"launch: the first message from the player \(pid (\d+)\) is malformed: unknown field type 42 "
                     r"\(expected 1-16 or 255\), at byte offset 0\. The player was stopped\.", text)
    assert match is not None, text
    assert text.count("byte offset 0") == 1, text
    assert "check the build; its log ends:\n" in text
    assert f"renderd-player[{match.group(1)}]" in text and "fault at start: garbage" in text
    assert err.offset == 0 and err.field_type == 42
    assert isinstance(err.__cause__, ProtocolError)

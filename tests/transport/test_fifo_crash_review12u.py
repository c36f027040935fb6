"""A player that closes server.pipe in the middle of a message: the crash quotes the partial message's error
with no parentheses inside its parentheses, and its byte offset once."""

from __future__ import annotations

import re

import pytest

import renderd
from renderd.errors import PlayerCrashed, ProtocolError
from renderd.transport import fifo


@pytest.mark.parametrize("fault", ["truncate", "close"])
def test_a_message_cut_short_is_quoted_without_nested_parentheses(no_leaks, monkeypatch, fault):
    monkeypatch.setattr(fifo, "EOF_CLASSIFY_TIMEOUT", 0.2)  # ("close": the player stays alive)
    env = renderd.launch(width=32, height=32, args=["--static-frame"], start_timeout=30, step_timeout=10)
    try:
        with pytest.raises(PlayerCrashed) as info:
            env.step({"action": "RenderdFault", "fault": fault})
    finally:
        env.close()
    first = str(info.value).splitlines()[0]
    partial = info.value.__cause__
    assert isinstance(partial, ProtocolError) and partial.offset is not None
    quoted = re.search(r"in the middle of a message \(([^()]*)\) while renderd waited", first)
    assert quoted is not None, first
    assert quoted.group(1).count(f"byte offset {partial.offset}") == 1, first

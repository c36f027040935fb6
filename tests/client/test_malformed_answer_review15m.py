"""A malformed answer mid-session names the action and the player, keeps the decoder's position, and says the
session is broken (a vector session says what to do with the whole instead); a malformed first frame is still
reported once, by launch."""

from __future__ import annotations

import pytest

import renderd
from renderd.errors import CallOrderError, ProtocolError


def test_a_malformed_answer_names_the_action_and_the_player(tmp_path):
    session = renderd.launch(width=32, height=24, platform="headless", start_timeout=60, step_timeout=30,
                             log_path=str(tmp_path / "player.log"))
    try:
        with pytest.raises(ProtocolError) as info:
            session.step("RenderdFault", fault="garbage")
        e = info.value
        text = str(e)
        assert text.startswith(f"RenderdFault: the answer from the player (pid {session.pid}) is malformed: "
                               "unknown field type 42"), text
        assert text.endswith("The session is broken: close it and start a new one."), text
        assert f"at byte offset {e.offset}" in text and text.count("byte offset") == 1, text
        assert e.field_type == 42
        cause = e.__cause__
        assert isinstance(cause, ProtocolError) and cause.offset == e.offset
        with pytest.raises(CallOrderError, match="broken session"):
            session.step("Pass")
    finally:
        session.close()


def test_in_a_vector_session_the_slot_error_carries_no_advice_of_its_own():
    vector = renderd.launch_many(2, width=32, height=24, platform="headless", start_timeout=60, step_timeout=30)
    try:
        with pytest.raises(ProtocolError) as info:
            vector.step([{"action": "RenderdFault", "fault": "garbage"}, "Pass"])
        text = str(info.value)
        assert "slot 0: ProtocolError: RenderdFault: the answer from the player (pid" in text, text
        assert "is malformed: unknown field type 42" in text, text
        assert "start a new one" not in text and "replace_on_crash" in text, text
    finally:
        vector.close()


def test_a_malformed_first_frame_is_reported_once_by_launch():
    with pytest.raises(ProtocolError) as info:
        renderd.launch(width=32, height=24, platform="headless", args=["--fault-at-start", "garbage"],
                       start_timeout=60)
    text = str(info.value)
    assert text.startswith("launch: the first message from the player (pid "), text
    assert "the answer from the player" not in text, text

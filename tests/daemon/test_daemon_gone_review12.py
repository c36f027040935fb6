"""A leased session whose daemon died: its step says so, and its close() does not warn about a release that
could not be made."""

from __future__ import annotations

import logging
import signal

import pytest

from renderd.daemon.client import connect
from renderd.errors import PlayerCrashed
from tests.daemon.conftest import fast_config


def test_a_session_whose_daemon_died_says_it_once_and_closes_quietly(daemon, caplog):
    # The step said "the daemon stopped it: the renderd daemon ... is no longer running" (it did not: it died),
    # and close() then warned "could not release the lease: ... Is `renderd start` running?".
    d = daemon(fast_config())
    session = connect("demo", socket=d.socket, timeout=10)
    try:
        assert session.step("Pass").sequence_id == 1
        d.signal(signal.SIGKILL)
        d.wait_exit()
        with pytest.raises(PlayerCrashed) as info:
            session.step("Pass")
        message = str(info.value)
        assert f"the renderd daemon at {d.socket} is no longer running" in message, message
        assert "the daemon stopped it" not in message, message
    finally:
        with caplog.at_level(logging.INFO, logger="renderd"):
            session.close()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not warnings, [r.getMessage() for r in warnings]
    assert any("the lease ended with the renderd daemon" in r.getMessage() for r in caplog.records)

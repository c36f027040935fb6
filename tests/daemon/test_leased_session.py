"""A session from ``renderd.connect`` is on a player whose first frame the daemon read before leasing it."""

from __future__ import annotations

import pytest

from renderd.daemon.client import connect
from renderd.errors import CallOrderError
from tests.daemon.conftest import fast_config


def test_wait_ready_on_a_leased_session_says_at_once_that_the_player_is_ready(daemon):
    d = daemon(fast_config())
    with connect("demo", socket=d.socket) as session:
        with pytest.raises(CallOrderError, match="the daemon received its first frame before leasing it"):
            session.wait_ready(timeout=30)
        event = session.step("Pass")  # the session is not broken by it
        assert event.sequence_id == 1 and event.metadata["lastActionSuccess"]
    (player,) = d.players()
    assert player["state"] == "READY" and player["lease"] is None  # released cleanly

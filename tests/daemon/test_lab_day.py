"""A lab's day against one daemon: leases whose clients change the screen, then hand the player on."""

from __future__ import annotations

import pytest

import renderd

from tests.daemon.conftest import fast_config


def test_a_resized_leased_player_is_not_handed_on_at_its_new_size(daemon):
    # A client that changed its leased player's screen (reset with width/height) and released it cleanly
    # left the player at that size: the next client's lease said 64 x 48, its frames were 32 x 24.
    d = daemon(fast_config(extra="width = 64\nheight = 48"))
    with renderd.connect("demo", socket=d.socket, timeout=10) as session:
        event = session.reset(width=32, height=24)
        assert (event.screen_width, event.screen_height) == (32, 24)
    with renderd.connect("demo", socket=d.socket, timeout=10) as session:
        assert (session.width, session.height) == (64, 48)
        event = session.step("MoveAhead")
        assert (event.screen_width, event.screen_height) == (64, 48)
    # A client that kept the size hands its player on as before.
    with renderd.connect("demo", socket=d.socket, timeout=10) as session:
        pid = session.pid
        session.step("MoveAhead")
    with renderd.connect("demo", socket=d.socket, timeout=10) as session:
        assert session.pid == pid


def test_a_forgotten_resized_session_frees_its_lease_at_once_and_is_recycled(daemon):
    d = daemon(fast_config(extra="width = 64\nheight = 48"))
    session = renderd.connect("demo", socket=d.socket, timeout=10)
    session.reset(width=32, height=24)
    with pytest.warns(ResourceWarning, match="unclosed renderd session"):  # (the leak is named, as it should be)
        del session  # no reference cycle keeps it: released (uncleanly: it was resized) right here
    with renderd.connect("demo", socket=d.socket, timeout=10) as session:
        event = session.step("MoveAhead")
        assert (event.screen_width, event.screen_height) == (64, 48)

"""A new user's first hour, as README.md tells it: ``renderd start`` on its built-in default runs in the
foreground, a client in another process leases its player, and Ctrl-C stops it cleanly."""

from __future__ import annotations

import os
import signal

import pytest

import renderd
from tests.daemon.conftest import daemon  # noqa: F401 - a fixture
from tests.helpers.leaks import pid_gone, wait_for


def test_ctrl_c_stops_the_built_in_daemon_and_leaves_nothing_behind(daemon):
    d = daemon()  # the README's `renderd start`: environment demo on renderd-player
    with renderd.connect("demo", socket=d.socket, timeout=10) as session:
        event = session.step(action="RotateLeft", degrees=30)
        assert event.frame.shape == (300, 300, 3) and event.metadata["lastActionSuccess"] is True
        player = session.pid
        # Ctrl-C in the daemon's terminal: SIGINT, with a lease held.
        d.signal(signal.SIGINT)
        assert d.wait_exit() == 0, d.output()
        # The lease ended with the daemon: the client's next step is a PlayerCrashed, not a wait.
        with pytest.raises(renderd.PlayerCrashed):
            session.step("MoveAhead")
    wait_for(lambda: pid_gone(player), 5, "the leased player to be gone")
    assert not os.path.exists(d.socket), "the control socket was left behind"
    assert not os.path.exists(os.path.join(d.runtime_dir, "players")), "the pipe directories were left behind"
    assert d.descendants() == []
    assert "stop requested by signal" in d.output()

"""Contract check: a leased player that ends before the client's first step is a ``PlayerCrashed``.

``renderd.connect()`` opens ``client.pipe`` at the first step. When the daemon has stopped the player by then
(its environment removed, the daemon stopping) and removed its pipes, that step used to raise a bare
``RenderdError`` ("cannot open the player's client.pipe for writing ... no such file or directory"): a
player that exits is a ``PlayerCrashed`` saying how it ended, whatever the client was doing.
"""

from __future__ import annotations

import signal

import pytest

import renderd
from tests.daemon.conftest import fast_config, wait_for


def test_player_stopped_before_the_first_step_is_player_crashed(daemon) -> None:
    d = daemon(fast_config())
    session = renderd.connect("demo", socket=d.socket, timeout=10, step_timeout=10)
    try:
        pid = session.pid
        status, _ = d.client.request("DELETE", "/v1/environments/demo")
        assert status == 202
        wait_for(lambda: all(e["name"] != "demo" for e in d.environments()), 10, "the environment to be gone")
        with pytest.raises(renderd.PlayerCrashed) as info:
            session.step("MoveAhead")
        assert info.value.pid == pid
        assert "the daemon stopped it: environment removed" in str(info.value), str(info.value)
        # (no deadline named: nothing timed out, as in the channel's other crash messages)
        assert "step_timeout" not in str(info.value), str(info.value)
    finally:
        session.close()


def test_daemon_stopped_before_the_first_step_is_player_crashed(daemon) -> None:
    d = daemon(fast_config())
    session = renderd.connect("demo", socket=d.socket, timeout=10, step_timeout=10)
    try:
        d.signal(signal.SIGTERM)
        assert d.wait_exit() == 0
        with pytest.raises(renderd.PlayerCrashed) as info:
            session.step("MoveAhead")
        assert "is no longer running" in str(info.value), str(info.value)
    finally:
        session.close()

"""A daemon player that sends no first frame: its FAILED reason says what renderd saw (as renderd.launch() says
it), not only that the deadline passed."""

from __future__ import annotations

from tests.daemon.conftest import fast_config, wait_for
from tests.helpers.control_review14e import run_renderd


def test_a_player_that_never_opens_server_pipe_is_failed_with_what_renderd_saw(daemon):
    silent = '["/bin/sh", "-c", "exec sleep 60"]'
    text = fast_config(executable=silent).replace("start_timeout = 20.0", "start_timeout = 0.3").replace(
        "max_boot_failures = 3", "max_boot_failures = 1")
    d = daemon(text, ready=False)
    wait_for(d.health, 10, "the daemon to answer")
    (p,) = d.wait_players(lambda ps: ps and ps[0]["state"] == "FAILED", timeout=10, what="the player to fail")
    assert p["reason"].startswith("no first frame within start_timeout (0.3 s); it has not opened server.pipe "
                                  "(still loading, or a build that does not speak AI2-THOR's FIFO protocol"), p
    status = run_renderd("status", "--socket", d.socket).stdout.decode()
    assert "demo[0] FAILED: no first frame within start_timeout (0.3 s); it has not opened server.pipe" in status


def test_a_player_that_opens_server_pipe_and_sends_nothing_is_told_apart(daemon):
    # (the shell holds server.pipe open for writing and says nothing)
    holds = '["/bin/sh", "-c", "exec sleep 60 3>\\"$AI2THOR_FIFO_SERVER_PIPE_PATH\\""]'
    text = fast_config(executable=holds).replace("start_timeout = 20.0", "start_timeout = 0.3").replace(
        "max_boot_failures = 3", "max_boot_failures = 1")
    d = daemon(text, ready=False)
    wait_for(d.health, 10, "the daemon to answer")
    (p,) = d.wait_players(lambda ps: ps and ps[0]["state"] == "FAILED", timeout=10, what="the player to fail")
    assert "; it opened server.pipe but has sent nothing on it (still loading? raise start_timeout)" in p["reason"], p

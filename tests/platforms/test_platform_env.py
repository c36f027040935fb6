"""The player's environment: ``env`` reaches the player and the probes, and the screen the platform chose
on a display named there is the one the player gets."""

from __future__ import annotations

import psutil
import pytest

import renderd
from renderd.errors import PlatformError
from tests.daemon.conftest import DaemonProcess

START = 30.0


def test_a_display_named_in_env_gets_the_screen_the_check_chose(xvfb):
    # Screen 0 is too small for 300 x 300, screen 1 fits: the check picks :N.1, and the player must get
    # :N.1, not the bare :N of env (which means screen 0, the one the check rejected).
    server = xvfb("-screen", "0", "200x200x24", "-screen", "1", "640x480x24", "+extension", "GLX")
    with renderd.launch("renderd-player", platform="Linux64", width=300, height=300, args=["--static-frame"],
                        env={"DISPLAY": server.name, "RENDERD_TEST_MARK": "1"}, start_timeout=START) as session:
        environ = psutil.Process(session.pid).environ()
        assert environ["DISPLAY"] == f"{server.name}.1"
        assert environ["RENDERD_TEST_MARK"] == "1"  # the rest of env still reaches the player
        assert session.step("Pass").frame.shape == (300, 300, 3)


def test_the_daemon_gives_each_player_its_screen_of_the_display_named_in_env(xvfb, tmp_path):
    # gpus = [0, 1] spreads two players over the two screens of the display named in env.
    server = xvfb("-screen", "0", "320x240x24", "-screen", "1", "320x240x24", "+extension", "GLX")
    daemon = DaemonProcess(tmp_path / "d", f"""
        [environments.demo]
        executable = ["renderd-player", "--static-frame"]
        width = 64
        height = 48
        platform = "Linux64"
        instances = 2
        gpus = [0, 1]
        env = {{ DISPLAY = "{server.name}" }}
    """)
    try:
        daemon.wait_ready()
        players = daemon.players()
        displays = sorted(psutil.Process(p["pid"]).environ()["DISPLAY"] for p in players)
        assert displays == [f"{server.name}.0", f"{server.name}.1"]
    finally:
        daemon.cleanup()


def test_a_display_named_in_env_that_fails_the_check_is_not_swapped_for_another(xvfb):
    # Depth 16 fails the check; a good display runs next to it. The player must not be moved to the other
    # display (possibly someone else's X server): the launch fails, naming the display that was asked for.
    bad = xvfb("-screen", "0", "320x240x16")
    xvfb("-screen", "0", "320x240x24", "+extension", "GLX")
    with pytest.raises(PlatformError) as info:
        renderd.launch("renderd-player", platform="Linux64", width=64, height=48, args=["--static-frame"],
                       env={"DISPLAY": bad.name}, start_timeout=START)
    assert bad.name in str(info.value)


def test_env_overrides_the_platforms_other_variables():
    # Only DISPLAY is the platform's to decide; anything else set in env wins (RENDERD_PLATFORM here, as
    # the transport benchmark uses it to have every column send 3-byte RGB).
    with renderd.launch("renderd-player", platform="headless", width=32, height=24, args=["--static-frame"],
                        env={"RENDERD_PLATFORM": "Linux64"}, start_timeout=START) as session:
        assert psutil.Process(session.pid).environ()["RENDERD_PLATFORM"] == "Linux64"

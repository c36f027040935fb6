"""The daemon's health report against a wall clock that jumps; its loop's wake-up pipe, shared with signals;
the process-wide display manager after a daemon's clean-up."""

from __future__ import annotations

import fcntl
import os
import signal
import struct
import termios
import textwrap
import time

import pytest

from renderd.config import loads
from renderd.daemon.service import _Platforms
from renderd.daemon.supervisor import Supervisor
from tests.daemon.conftest import fast_config


def test_health_uptime_does_not_follow_the_wall_clock(tmp_path, monkeypatch):
    # The wall clock is set back (NTP stepping it, an operator's `date -s`): the daemon has still been up
    # for as long as it has, never a negative time, and stepping it forward adds nothing.
    (tmp_path / "players").mkdir()
    (tmp_path / "logs").mkdir()
    sup = Supervisor(loads(textwrap.dedent(fast_config(instances=0))), players_dir=str(tmp_path / "players"),
                     log_dir=str(tmp_path / "logs"), platforms=_Platforms())
    try:
        wall = time.time
        for jump in (-3600.0, 86400.0):
            monkeypatch.setattr(time, "time", lambda jump=jump: wall() + jump)
            uptime = sup.health()["uptime"]
            assert 0 <= uptime < 60, (jump, uptime)
    finally:
        monkeypatch.undo()
        sup.close()


def test_wake_ups_never_fill_the_pipe_that_signals_share(tmp_path):
    # Signal handlers write their number into the loop's wake-up pipe (signal.set_wakeup_fd), and a full
    # pipe drops it: a SIGTERM lost. Threads waking a busy loop must therefore leave room: one pending
    # wake-up byte says all there is to say.
    (tmp_path / "players").mkdir()
    (tmp_path / "logs").mkdir()
    sup = Supervisor(loads(textwrap.dedent(fast_config(instances=0))), players_dir=str(tmp_path / "players"),
                     log_dir=str(tmp_path / "logs"), platforms=_Platforms())
    try:
        sup._drain_wake()
        for _ in range(100_000):  # the loop is not running: nothing drains the pipe
            sup.wake()
        assert _pending(sup._wake_r) <= 1
        os.write(sup.wakeup_fd, bytes([signal.SIGTERM]))  # as the C signal handler writes it
        assert sup._drain_wake() == [signal.SIGTERM]
        sup.wake()  # drained: the next wake-up is written again
        assert _pending(sup._wake_r) == 1
    finally:
        sup.close()


def _pending(fd: int) -> int:
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def test_after_a_daemon_in_this_process_stops_managed_displays_can_still_be_started():
    # A daemon run inside a Python process (a test, an embedding program) stops the displays it started
    # when it ends. The process-wide display manager must not stay shut for good: renderd.launch on a
    # managed display, or a second daemon, later in the same process must still get one.
    from renderd.platforms import xvfb

    if xvfb.find_xvfb(os.environ) is None:
        pytest.skip("Xvfb is not installed")
    _Platforms().shutdown()  # as the daemon's clean-up does
    display = xvfb.DisplayManager.default().acquire(64, 48)
    try:
        assert display.name.startswith(":")
    finally:
        display.release()

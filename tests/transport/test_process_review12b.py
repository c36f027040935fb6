"""A leased player's pid is checked to still name the leased player once its pidfd pins the process: a pid
given to another process meanwhile is refused, not watched as the player. Real child processes."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from renderd.errors import PlayerCrashed
from renderd.process import LeasedPlayer, PlayerProcess

from .conftest import wait_until

pytestmark = pytest.mark.usefixtures("no_leaks")

TICKS = os.sysconf("SC_CLK_TCK")


def _boottime() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def test_a_process_started_after_the_lease_is_not_taken_for_the_player(tmp_path):
    leased_at = _boottime()
    # (the next clock tick: the process below starts measurably after the lease)
    assert wait_until(lambda: int(_boottime() * TICKS) > int(leased_at * TICKS), 5)
    other = PlayerProcess.spawn(["sleep", "600"], None, None)
    try:
        fds = set(os.listdir("/proc/self/fd"))
        with pytest.raises(PlayerCrashed) as info:
            LeasedPlayer(other.pid, log_path=str(tmp_path / "player.log"), leased_at=leased_at)
        message = str(info.value)
        assert f"leased player pid {other.pid}" in message and "another process" in message, message
        assert info.value.pid == other.pid
        assert set(os.listdir("/proc/self/fd")) == fds  # its pidfd was closed
        assert other.poll() is None  # (and nothing was done to that process)
    finally:
        other.stop(1.0)


def test_the_daemons_start_time_must_match():
    from renderd.process import process_start_ticks

    player = PlayerProcess.spawn(["sleep", "600"], None, None)
    try:
        started = process_start_ticks(player.pid)
        assert started is not None and started <= int(_boottime() * TICKS)
        with pytest.raises(PlayerCrashed, match="another process"):
            LeasedPlayer(player.pid, start_time=started + 1)
        leased = LeasedPlayer(player.pid, start_time=started)
        try:
            assert not leased.exited() and leased.fileno() is not None
        finally:
            leased.close()
    finally:
        player.stop(1.0)


def test_the_player_leased_before_the_watch_is_watched():
    # (a guard: the player started before the lease was answered, as every leased player did)
    player = PlayerProcess.spawn(["sleep", "600"], None, None)
    try:
        leased = LeasedPlayer(player.pid)  # (default: it started before this watch was made)
        try:
            assert not leased.exited()
            player.stop(1.0)
            assert leased.wait_exit(5)
        finally:
            leased.close()
    finally:
        player.stop(1.0)


def test_an_exited_player_is_watched_as_exited_not_refused():
    # A pid whose process has exited (a zombie holds it) is not refused: the watch reports the exit, and the
    # crash asks the daemon how it ended.
    child = subprocess.Popen(["true"])
    try:
        assert wait_until(lambda: os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT), 5)
        leased = LeasedPlayer(child.pid, start_time=0)
        try:
            assert leased.exited()
        finally:
            leased.close()
    finally:
        child.wait(5)

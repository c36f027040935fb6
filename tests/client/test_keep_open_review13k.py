"""The player watches' ``keep_open()``: what Session.close() uses to keep the descriptors a waiting step polls (a
pidfd, a lease's log, a managed display's epoll) open under their numbers while it stops the player, instead of
swapping the watches' private attributes itself. And a managed display's session closed from another thread while a
step is about to poll: the epoll it polls stays open under its number until the step has left the pipes."""

from __future__ import annotations

import select
import shutil
import subprocess
import sys

import pytest

import renderd
import renderd.client
from renderd.process import LeasedPlayer, PlayerOnDisplay, PlayerProcess, poll_readable

from .conftest import START, check_close_under_a_held_step, fd_target

pytestmark = pytest.mark.usefixtures("no_leaks")

SLEEPER = [sys.executable, "-c", "import time; time.sleep(30)"]



def test_a_player_process_keeps_its_pidfd_open_until_released(tmp_path):
    player = PlayerProcess.spawn(SLEEPER, None, str(tmp_path / "player.log"))
    try:
        polled = player.fileno()
        release = player.keep_open()
        assert player.fileno() not in (None, polled)  # (the watch goes on with a duplicate)
        assert player.stop(0.5) is not None
        assert player.fileno() is None
        # Still the player's pidfd under its number, and it says the player exited.
        assert fd_target(polled) == "anon_inode:[pidfd]" and poll_readable(polled, 0)
    finally:
        player.stop(0.5)
    release()
    assert fd_target(polled) == "closed"
    release()  # (once only: a second call closes nothing)


def test_a_leased_player_keeps_its_pidfd_and_log_open_until_released(tmp_path):
    log = tmp_path / "player.log"
    log.write_text("one\ntwo\n")
    child = subprocess.Popen(SLEEPER)
    leased = None
    try:
        leased = LeasedPlayer(child.pid, log_path=str(log))
        polled, log_fd = leased.fileno(), leased._log_fd
        assert log_fd is not None
        release = leased.keep_open()
        assert leased.fileno() not in (None, polled) and leased._log_fd not in (None, log_fd)
        assert "two" in leased.log_tail()
        leased.close()
        assert fd_target(polled) == "anon_inode:[pidfd]" and fd_target(log_fd) == str(log)
        release()
        assert fd_target(polled) == "closed" and fd_target(log_fd) == "closed"
    finally:
        if leased is not None:
            leased.close()
        child.kill()
        child.wait()


def test_a_player_on_display_keeps_its_epoll_open_until_released(tmp_path):
    player = PlayerProcess.spawn(SLEEPER, None, str(tmp_path / "player.log"))
    display = subprocess.Popen(SLEEPER)

    class Display:
        pid, name, returncode = display.pid, ":99", None

        def alive(self) -> bool:
            return display.poll() is None

    watch = None
    try:
        watch = PlayerOnDisplay(player, Display())
        epoll_fd = watch.fileno()
        release_display, release_player = watch.keep_open(), player.keep_open()
        assert watch.fileno() not in (None, epoll_fd)
        watch.close()
        player.stop(0.5)
        # The kept epoll is the same epoll: it still reports the player's exit (its pidfd, kept too, is registered).
        assert fd_target(epoll_fd) == "anon_inode:[eventpoll]"
        poller = select.poll()
        poller.register(epoll_fd, select.POLLIN)
        assert poller.poll(0), "the kept epoll does not report the player's exit"
        release_display()
        release_player()
        assert fd_target(epoll_fd) == "closed"
    finally:
        if watch is not None:
            watch.close()
        player.stop(0.5)
        display.kill()
        display.wait()


@pytest.mark.xvfb
@pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed")
def test_a_managed_display_sessions_epoll_is_not_closed_under_a_waiting_step(monkeypatch, tmp_path):
    monkeypatch.setattr(renderd.client, "CLOSE_WAITER_TIMEOUT", 0.2)
    with renderd.launch(width=64, height=48, platform="Linux64", x_display="managed", env={"DISPLAY": ""},
                        start_timeout=START) as session:
        session.step("Pass")
        channel = session.channel
        assert isinstance(channel.player, PlayerOnDisplay)
        fds = [channel.fileno(), channel.writer_fileno(), channel.player.fileno(), session.process.fileno()]
        check_close_under_a_held_step(session, fds, "anon_inode:[eventpoll]", tmp_path)

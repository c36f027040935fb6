"""A player watch's wait while a stop() in another thread lets go of its pidfd (sets it to None, or to a duplicate it
closes): the wait reads the pidfd once per round, so it never polls None (a TypeError). The moment is placed exactly
with a line trace: the pidfd is let go just before the line that polls it. PlayerProcess.wait and
LeasedPlayer.wait_exit (a watch on a process this one did not start)."""

from __future__ import annotations

import linecache
import subprocess
import sys

import pytest

from renderd.process import LeasedPlayer, PlayerOnDisplay, PlayerProcess

pytestmark = pytest.mark.usefixtures("no_leaks")


def _let_go_before_the_poll(watch, code):
    """A line tracer that sets ``watch.pidfd`` to None right before the line of ``code`` that polls it; the list
    it fills says whether that line was reached."""
    let_go: list[int] = []

    def tracer(frame, event, arg):
        if frame.f_code is not code:
            return None
        line = linecache.getline(code.co_filename, frame.f_lineno)
        if event == "line" and not let_go and "poll_readable(" in line:
            watch.pidfd = None  # (as a stop() does in another thread, right before this line runs)
            let_go.append(frame.f_lineno)
        return tracer

    return tracer, let_go


def test_a_players_wait_does_not_poll_a_pidfd_let_go_after_its_check(tmp_path):
    proc = PlayerProcess.spawn(["sleep", "600"], None, tmp_path / "player.log")
    kept = proc.pidfd
    assert kept is not None
    tracer, let_go = _let_go_before_the_poll(proc, PlayerProcess.wait.__code__)
    sys.settrace(tracer)
    try:
        assert proc.wait(0.2) is None  # still running: the wait ends at its timeout, without raising
    finally:
        sys.settrace(None)
        proc.pidfd = kept
        proc.stop(grace=1)
    assert let_go, "the wait never reached its poll"


def test_a_leased_players_wait_does_not_poll_a_pidfd_let_go_after_its_check():
    child = subprocess.Popen(["sleep", "600"])
    try:
        watch = LeasedPlayer(child.pid)
        kept = watch.pidfd
        assert kept is not None
        tracer, let_go = _let_go_before_the_poll(watch, LeasedPlayer.wait_exit.__code__)
        sys.settrace(tracer)
        try:
            assert watch.wait_exit(0.2) is False
        finally:
            sys.settrace(None)
            watch.pidfd = kept
            watch.close()
        assert let_go, "the wait never reached its poll"
    finally:
        child.kill()
        child.wait()


class _Display:
    """A stand-in for a managed display's handle (PlayerOnDisplay watches its process): a real process."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.pid, self.name, self.returncode = process.pid, ":99", None

    def alive(self) -> bool:
        return self.process.poll() is None


@pytest.mark.parametrize("let_go", ["none", "closed"])
def test_a_player_on_displays_wait_does_not_poll_an_epoll_let_go_after_its_check(tmp_path, let_go):
    player = PlayerProcess.spawn(["sleep", "600"], None, tmp_path / "player.log")
    display = subprocess.Popen(["sleep", "600"])
    watch = PlayerOnDisplay(player, _Display(display))
    kept = watch._epoll
    reached: list[int] = []
    code = PlayerOnDisplay.wait_exit.__code__

    def tracer(frame, event, arg):
        if frame.f_code is not code:
            return None
        if event == "line" and not reached and ".poll(" in linecache.getline(code.co_filename, frame.f_lineno):
            # (as a close() in another thread does, right before this line runs)
            if let_go == "none":
                watch._epoll = None
            else:
                kept.close()
            reached.append(frame.f_lineno)
        return tracer

    try:
        sys.settrace(tracer)
        try:
            assert watch.wait_exit(0.2) is False
        finally:
            sys.settrace(None)
        assert reached, "the wait never reached its poll"
    finally:
        watch._epoll = None if kept.closed else kept
        watch.close()
        player.stop(0.5)
        display.kill()
        display.wait()

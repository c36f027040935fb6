"""Races inside the supervisor, driven deterministically: an in-process Supervisor with real players, whose
loop thread is held at a chosen point by holding the supervisor's lock."""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import sys
import termios
import textwrap
import threading
import time

import pytest

from renderd.config import loads
from renderd.daemon.service import _Platforms
from renderd.daemon.supervisor import Supervisor
from tests.daemon.conftest import fast_config
from tests.helpers.leaks import Leaks, pid_gone, wait_for

DEADLINE = 20.0


def _wait_exited(pid: int) -> None:
    """Until ``pid`` has exited (its pidfd is readable: every thread is gone, not only the leader)."""
    fd = os.pidfd_open(pid)
    try:
        assert select.select([fd], [], [], DEADLINE)[0], f"pid {pid} did not exit within {DEADLINE} s"
    finally:
        os.close(fd)


def _loop_frame(sup: Supervisor):
    return sys._current_frames().get(sup.loop_thread.ident)


def _loop_idle(sup: Supervisor) -> bool:
    """The loop waits in select with no wake-up pending."""
    frame = _loop_frame(sup)
    if frame is None or frame.f_code.co_name != "select":
        return False
    pending = bytearray(4)
    fcntl.ioctl(sup._wake_r, termios.FIONREAD, pending, True)
    return int.from_bytes(pending, "little") == 0


@contextlib.contextmanager
def _holding_idle_loop(sup: Supervisor):
    """Hold the supervisor's lock while its loop waits in select with nothing pending: the next thing the
    loop does is take the events select returns to the lock, and wait there."""
    deadline = time.monotonic() + DEADLINE
    while True:
        wait_for(lambda: _loop_idle(sup), DEADLINE, "the loop to wait in select")
        sup.lock.acquire()
        if _loop_idle(sup):
            break
        sup.lock.release()  # it woke meanwhile: let it run, and try again
        assert time.monotonic() < deadline, "the loop never stayed in select"
    try:
        yield
    finally:
        sup.lock.release()


def _loop_events(sup: Supervisor) -> list[str] | None:
    """The kinds of event the loop took from select, once it is out of select and waits for the lock the
    test holds; None while it is elsewhere."""
    frame = _loop_frame(sup)
    if frame is None or frame.f_code.co_name != "_loop" or "events" not in frame.f_locals:
        return None
    return [key.data[0] for key, _mask in frame.f_locals["events"]]


@pytest.fixture
def supervisor(tmp_path):
    (tmp_path / "players").mkdir()
    (tmp_path / "logs").mkdir()
    leaks = Leaks(tmp_path / "players", threads=True, zombies=True)
    sup = Supervisor(loads(textwrap.dedent(fast_config())), players_dir=str(tmp_path / "players"),
                     log_dir=str(tmp_path / "logs"), platforms=_Platforms())
    loop = threading.Thread(target=sup.run, name="renderd-supervisor-test", daemon=True)
    loop.start()
    sup.loop_thread = loop
    try:
        yield sup
    finally:
        sup.request_stop()
        loop.join(DEADLINE)
        assert not loop.is_alive(), "the supervisor loop did not finish"
        sup.close()
        leaks.check()


def _player(sup: Supervisor):
    with sup.lock:
        players = list(sup.environments["demo"].players)
    assert len(players) <= 1, players
    return players[0] if players else None


def _ready(sup: Supervisor, spawns: int = 0) -> bool:
    p = _player(sup)
    return p is not None and p.spawns > spawns and p.state.value == "READY"


def _signal_exits(sup: Supervisor) -> float:
    value = sup.metrics.registry.get_sample_value(
        "renderd_player_exits_total", {"environment": "demo", "how": "signal"})
    return value or 0.0


def test_an_exit_seen_by_a_release_and_by_the_loop_is_handled_once(supervisor):
    """The player dies under its lease; the loop's select returns its pidfd, but before the loop gets the
    lock the client's release finds the exit and handles it (classifies, counts, restarts). The loop must
    then drop its stale event, not handle the same exit a second time.

    The loop is held by holding the supervisor's lock. An attempt in which the loop left select for
    another reason (its idle timeout) shows nothing and is made again."""
    sup = supervisor
    spawns = 0
    shown = 0
    for _attempt in range(3):
        wait_for(lambda n=spawns: _ready(sup, n), DEADLINE, "a READY player")
        lease, answer = sup.acquire("demo", os.getpid(), DEADLINE)
        pid = answer["pid"]
        with _holding_idle_loop(sup):
            os.kill(pid, signal.SIGSEGV)
            _wait_exited(pid)
            wait_for(lambda: _loop_events(sup) is not None, DEADLINE, "the loop to leave select")
            kinds = _loop_events(sup)  # it stays blocked on the lock this thread holds
            answer = sup.release(lease.id, clean=False)
            assert answer["player_exit"]["returncode"] == -signal.SIGSEGV
            spawns = _player(sup).spawns
        wait_for(lambda n=spawns: _ready(sup, n), DEADLINE, "the player restarted and READY")
        spawns = _player(sup).spawns
        assert pid_gone(pid)
        if "exit" in kinds:
            shown += 1
            break
    assert shown, "the loop never took the player's exit from select while the test held the lock"
    assert _signal_exits(sup) == _attempt + 1
    assert spawns == _attempt + 2  # the first spawn, and one restart for each exit
    assert _player(sup).restarts == _attempt + 1

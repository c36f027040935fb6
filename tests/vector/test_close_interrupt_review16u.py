"""A Ctrl-C while VectorSession.close() waits out the stop grace of players that ignore SIGTERM: every slot's stop
is hurried as a single session's is (SIGKILL at once, then reaped), not only the one closed in the main thread, and
the KeyboardInterrupt is raised once every player is gone."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time

import psutil
import pytest

import renderd
from renderd.process import DEFAULT_STOP_GRACE
from tests.vector.conftest import START_TIMEOUT, SIZE, send_signal, signal_raising, wait_for

#: The reference player installed next to this interpreter.
PLAYER = shutil.which("renderd-player", path=os.path.dirname(sys.executable)) or shutil.which("renderd-player")
#: The default stop grace (5 s): a hurried close returns in well under half of it.
GRACE = DEFAULT_STOP_GRACE
#: How long the helper waits for the close to reach the players' grace.
WAIT = 15.0


def _stubborn(tmp_path, name: str) -> renderd.Session:
    """A static-frame player under a shell that ignores SIGTERM and outlives the player (exec sleep): its stop
    waits out the whole grace."""
    script = tmp_path / name
    script.write_text(f"#!/bin/sh\ntrap '' TERM\n\"{PLAYER}\" \"$@\"\nexec sleep 60\n")
    script.chmod(0o755)
    return renderd.launch(str(script), width=SIZE, height=SIZE, platform="headless", args=["--static-frame"],
                          start_timeout=START_TIMEOUT)


def _in_grace(session: renderd.Session) -> bool:
    """Whether ``session``'s stop waits out its grace: SIGTERM sent, the player exited, its shell still running."""
    if not session.process.term_sent:
        return False
    try:
        return all(p.status() == psutil.STATUS_ZOMBIE for p in psutil.Process(session.pid).children(recursive=True))
    except psutil.NoSuchProcess:
        return False


def _gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _plain() -> renderd.Session:
    return renderd.launch(width=SIZE, height=SIZE, platform="headless", args=["--static-frame"],
                          start_timeout=START_TIMEOUT)


def _started(*makers) -> list[renderd.Session]:
    """The sessions the ``makers`` launch (those launched already closed if one fails)."""
    sessions: list[renderd.Session] = []
    try:
        for make in makers:
            sessions.append(make())
    except BaseException:
        for session in sessions:
            session.close()
        raise
    return sessions


def _ctrl_c_during_close(sessions: list[renderd.Session], stubborn: list[renderd.Session], ready) -> None:
    """Close a vector session of ``sessions``, with a Ctrl-C once ``ready()`` (the close waits out the grace of the
    ``stubborn`` ones): close() raises KeyboardInterrupt within half the grace of it, every player killed and reaped."""
    for session in stubborn:
        assert session.stop_grace == GRACE
    groups = []
    for session in sessions:
        leader = psutil.Process(session.pid)
        groups += [leader, *leader.children(recursive=True)]
    vs = renderd.VectorSession(sessions)
    handled: list[float] = []
    sent: list[float] = []

    def interrupt() -> None:
        try:
            wait_for(ready, WAIT, "the close to wait out the players' grace")
        except BaseException:
            return  # (the test fails on what close() did)
        sent.append(time.monotonic())
        send_signal(signal.SIGINT)

    helper = threading.Thread(target=interrupt)
    try:
        with signal_raising(signal.SIGINT, handled):
            helper.start()
            with pytest.raises(KeyboardInterrupt):
                vs.close()
            raised = time.monotonic()
            # (As it raises, not once the cleanup below has waited for what may still run.)
            stopped = [(s.process._stopped, s.process.returncode, s.process.pidfd) for s in sessions]
    finally:
        helper.join()
        vs.close()
        for session in sessions:
            session.close()
    assert sent and handled, "no Ctrl-C was sent"
    took = raised - sent[0]
    assert took < GRACE / 2, f"close() raised KeyboardInterrupt {took:.2f} s after the Ctrl-C: the grace was waited out"
    for session, (done, code, pidfd) in zip(sessions, stopped):
        state = f"stopped {done}, return code {code}, pidfd {pidfd}"
        reaped = done and code is not None and pidfd is None
        assert reaped, f"player pid {session.pid} not reaped as close() raised: {state}"
        if session in stubborn:
            assert code == -signal.SIGKILL, session.process.exit_description()
    # (The leaders are reaped; what they started dies of the group's SIGKILL as the kernel gets to it.)
    wait_for(lambda: all(_gone(p) for p in groups), WAIT, "every process of the players' groups to end")


def test_ctrl_c_while_every_slot_waits_out_its_grace_hurries_them_all(no_leaks, tmp_path):
    # Slot 0 is closed in the main thread (the Ctrl-C interrupts its stop), slot 1 in a worker, which waited out the
    # whole grace before: the Ctrl-C reached the main thread only.
    sessions = _started(lambda: _stubborn(tmp_path, "a.sh"), lambda: _stubborn(tmp_path, "b.sh"))
    _ctrl_c_during_close(sessions, sessions, lambda: all(_in_grace(s) for s in sessions))


def test_ctrl_c_while_the_main_thread_waits_for_a_slow_slot_hurries_it(no_leaks, tmp_path):
    # Slot 0 stops at once; the main thread then waits for slot 1's worker, which waits out its grace.
    sessions = _started(_plain, lambda: _stubborn(tmp_path, "b.sh"))
    _ctrl_c_during_close(
        sessions, sessions[1:], lambda: sessions[0].process._stopped and _in_grace(sessions[1])
    )

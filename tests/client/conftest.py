"""Fixtures for client tests: the reference player and a tiny scripted peer, leak checks, deadlines; a session
closed while another thread's step waits (``close_while_stepping``, ``blocked_in_poll``), or while it is held just
before it polls its descriptors."""

from __future__ import annotations

import linecache
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import renderd.transport.fifo as fifo
from renderd.errors import CallOrderError
from tests.helpers.fds_review14c import fd_target, take_numbers  # noqa: F401  (take_numbers: used by the tests)
from tests.helpers.leaks import Leaks, live_children, open_fds, wait_for  # noqa: F401  (used by the tests)
from tests.helpers.pause import line_of, pause_at, traced_thread

PEER = str(Path(__file__).parent.parent / "transport" / "peer.py")

#: Generous deadline for a player's first frame on a busy 2-CPU machine (a test that hits it failed).
START = 30.0


def peer_argv(mode: str = "serve", *args: object) -> list[str]:
    return [sys.executable, PEER, mode, *(str(a) for a in args)]


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """Make launch() create its pipe directories under tmp_path, so a test can see what it leaves."""
    root = tmp_path / "runtime"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


@pytest.fixture
def no_leaks(private_tmp):
    """Fail the test if it leaves a descriptor, a child process, or a pipe directory behind."""
    leaks = Leaks(private_tmp)
    yield leaks
    leaks.check()


class Timer:
    def __enter__(self) -> "Timer":
        self.start = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.monotonic() - self.start


# -- a close while a step waits -----------------------------------------------------------------------------------


def close_while_stepping(session, step, waiting) -> None:
    """Run ``step`` in a thread of its own; once ``waiting(thread)`` says it waits, close ``session`` from
    this thread: the step must end within 15 s of the close."""
    stepper = threading.Thread(target=step)
    stepper.start()
    try:
        wait_for(lambda: waiting(stepper), START, "the step to wait")
        started = time.monotonic()
        session.close()
        stepper.join(15)
        assert not stepper.is_alive(), "the step still waits after close()"
        assert time.monotonic() - started < 15
    finally:
        session.close()
        stepper.join(15)


def blocked_in_poll(thread: threading.Thread) -> bool:
    """Whether ``thread`` waits in a poll of the FIFO channel (for an answer, or for room to write)."""
    frame = sys._current_frames().get(thread.ident)
    return (
        frame is not None and frame.f_code.co_filename.endswith(os.path.join("transport", "fifo.py"))
        and "poll(" in linecache.getline(frame.f_code.co_filename, frame.f_lineno)
    )


# -- a close under a step about to poll --------------------------------------------------------------------------

@contextmanager
def held_step(session) -> Iterator[tuple[threading.Thread, dict[str, object]]]:
    """A thread (``stepper``) stepping ``session`` with Pass, held inside its channel just before it polls its
    descriptors; at the end it is let go and joined (at most ``START`` s). Yields the thread and its outcome
    (``event``: what the step returned, or ``error``: what it raised)."""
    code = fifo.FifoChannel.recv.__code__
    at = line_of(fifo.FifoChannel.recv, "events = poll(_ms(wait))")
    reached, release = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}
    trace = pause_at(code, session.channel, at, reached, release)  # (a step inside its channel, about to poll)
    stepper = traced_thread(trace, lambda: session.step("Pass"), outcome, "event", "error", "stepper")
    stepper.start()
    try:
        assert reached.wait(START), "the step never polled"
        yield stepper, outcome
    finally:
        release.set()
        stepper.join(START)


def check_close_under_a_held_step(session, fds: list[int], polled: str, tmp_path: Path) -> None:
    """Close ``session`` (its CLOSE_WAITER_TIMEOUT made short) while a step is held just before it polls ``fds``,
    of which ``fds[2]`` is ``polled`` (the pidfd, or a display's epoll), and whatever else the player's watch has:
    the session is closed, its pipes left to the step; ``fds`` refer to what they did (no file opened meanwhile
    takes their numbers) until the step, let go, ends with its answer or a CallOrderError, and the pipes are
    closed as it ends."""
    channel = session.channel
    before = {fd: fd_target(fd) for fd in fds}
    assert before[fds[2]] == polled, before
    opened: list[int] = []
    try:
        with held_step(session) as (stepper, outcome):
            session.close()  # (stops the player, releases its display, leaves the step the pipes after the wait)
            assert session.closed and not channel.closed
            during = {fd: fd_target(fd) for fd in fds}
            take_numbers(fds, opened, tmp_path)
            assert during == before, f"descriptors the step polls were closed under it: {during} (were {before})"
            assert not set(fds) & set(opened)
    finally:
        for fd in opened:
            os.close(fd)
    assert not stepper.is_alive()
    # (Its answer, if it came before the player was stopped, is still given; else the step says it was closed.)
    assert outcome.get("event") or isinstance(outcome.get("error"), CallOrderError), outcome
    wait_for(lambda: channel.closed, 5.0, "the pipes to be closed as the step ended")

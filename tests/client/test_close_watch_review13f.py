"""A session closed from another thread while a step is inside its channel, about to poll the pipes together with
the player's pidfd: the stop of the player closed that pidfd at once, though the step (left the pipes once
``CLOSE_WAITER_TIMEOUT`` had passed) still had its number registered in its poll, so its next poll polled whatever
file had taken the number since. Now the pidfd stays open under its number until the pipes are closed, as the step
ends; the player's stop closes a duplicate."""

from __future__ import annotations

import os
import threading

import pytest

import renderd
import renderd.client
import renderd.transport.fifo as fifo
from renderd.errors import CallOrderError

from tests.helpers.pause import line_of, pause_at, traced_thread

from .conftest import START
from .test_launch_review8 import _wait_for

pytestmark = pytest.mark.usefixtures("no_leaks")

MOST_FILES = 256


def _target(fd: int) -> str:
    """What descriptor ``fd`` refers to (a pipe whose name close() removed is the same pipe), or "closed"."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}").removesuffix(" (deleted)")
    except OSError:
        return "closed"


def test_the_pidfd_a_waiting_step_polls_is_not_closed_under_it(monkeypatch, tmp_path):
    monkeypatch.setattr(renderd.client, "CLOSE_WAITER_TIMEOUT", 0.2)
    code = fifo.FifoChannel.recv.__code__
    at = line_of(fifo.FifoChannel.recv, "events = poll(_ms(wait))")
    opened: list[int] = []
    with renderd.launch(width=64, height=48, start_timeout=START) as session:
        session.step("Pass")  # (client.pipe open: every descriptor of the step exists)
        channel = session.channel
        fds = [channel.fileno(), channel.writer_fileno(), session.process.fileno()]
        before = {fd: _target(fd) for fd in fds}
        assert before[fds[2]] == "anon_inode:[pidfd]", before
        reached, release = threading.Event(), threading.Event()
        outcome: dict[str, object] = {}

        trace = pause_at(code, channel, at, reached, release)  # (a step inside its channel, about to poll)

        stepper = traced_thread(trace, lambda: session.step("Pass"), outcome, "event", "error", "stepper")
        stepper.start()
        try:
            assert reached.wait(START), "the step never polled"
            session.close()  # (stops the player, waits 0.2 s for the step, leaves it the pipes)
            assert session.closed and not channel.closed
            during = {fd: _target(fd) for fd in fds}
            for k in range(MOST_FILES):
                if set(fds) <= set(opened):
                    break
                path = tmp_path / f"other-{k}"
                path.write_bytes(b"x")
                opened.append(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
            assert during == before, f"descriptors the step polls were closed under it: {during} (were {before})"
            assert not set(fds) & set(opened)
        finally:
            release.set()
            stepper.join(START)
            for fd in opened:
                os.close(fd)
        assert not stepper.is_alive()
        # (Its answer, if it came before the player was stopped, is still given; else the step says it was closed.)
        assert outcome.get("event") or isinstance(outcome.get("error"), CallOrderError), outcome
        _wait_for(lambda: channel.closed, 5.0, "the pipes to be closed as the step ended")


def test_a_session_with_no_player_to_stop_leaves_the_pipes_to_a_waiting_step(tmp_path):
    # A session built over a channel with neither a process nor on_close (close() cannot end a step's wait): close()
    # from another thread closed its pipes at once, under the waiting step, which then read the answer from whatever
    # file had taken server.pipe's number. Now the pipes are left to the step, and closed as it ends.
    opened: list[int] = []
    with renderd.launch(width=64, height=48, start_timeout=START) as launched:
        launched.step("Pass")
        bare = renderd.Session(launched.channel, step_timeout=START, sequence_id=launched.sequence_id)
        channel = launched.channel
        fds = [channel.fileno(), channel.writer_fileno()]
        before = {fd: _target(fd) for fd in fds}
        outcome: dict[str, object] = {}

        def step() -> None:
            try:
                outcome["event"] = bare.step({"action": "RenderdFault", "fault": "sleep", "seconds": 0.5})
            except BaseException as exc:  # noqa: BLE001 - the test looks at it
                outcome["error"] = exc

        stepper = threading.Thread(target=step, name="stepper")
        stepper.start()
        try:
            _wait_for(lambda: bare._other_thread_inside() and bare.state is renderd.client.SessionState.PENDING, 10.0,
                      "the step to wait for its answer")
            bare.close()
            assert bare.closed
            during = {fd: _target(fd) for fd in fds}
            for k in range(MOST_FILES):
                if set(fds) <= set(opened):
                    break
                path = tmp_path / f"other-{k}"
                path.write_bytes(b"not an answer\n" * 8)
                opened.append(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
            stepper.join(START)
            assert not stepper.is_alive()
            assert during == before, f"the pipes were closed under the waiting step: {during} (were {before})"
            read = {fd: os.lseek(fd, 0, os.SEEK_CUR) for fd in opened if os.lseek(fd, 0, os.SEEK_CUR)}
            assert not read, f"the step read files opened after the close: {read}"
            # (Its answer came after the close: it is still given, or the step says the session was closed.)
            assert outcome.get("event") or isinstance(outcome.get("error"), CallOrderError), outcome
            _wait_for(lambda: channel.closed, 5.0, "the pipes to be closed as the step ended")
        finally:
            stepper.join(START)
            for fd in opened:
                os.close(fd)

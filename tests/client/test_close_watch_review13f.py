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
from renderd.errors import CallOrderError

from .conftest import START, check_close_under_a_held_step, fd_target, take_numbers, wait_for

pytestmark = pytest.mark.usefixtures("no_leaks")



def test_the_pidfd_a_waiting_step_polls_is_not_closed_under_it(monkeypatch, tmp_path):
    monkeypatch.setattr(renderd.client, "CLOSE_WAITER_TIMEOUT", 0.2)
    with renderd.launch(width=64, height=48, start_timeout=START) as session:
        session.step("Pass")  # (client.pipe open: every descriptor of the step exists)
        fds = [session.channel.fileno(), session.channel.writer_fileno(), session.process.fileno()]
        check_close_under_a_held_step(session, fds, "anon_inode:[pidfd]", tmp_path)


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
        before = {fd: fd_target(fd) for fd in fds}
        outcome: dict[str, object] = {}

        def step() -> None:
            try:
                outcome["event"] = bare.step({"action": "RenderdFault", "fault": "sleep", "seconds": 0.5})
            except BaseException as exc:  # noqa: BLE001 - the test looks at it
                outcome["error"] = exc

        stepper = threading.Thread(target=step, name="stepper")
        stepper.start()
        try:
            wait_for(lambda: bare._other_thread_inside() and bare.state is renderd.client.SessionState.PENDING, 10.0,
                     "the step to wait for its answer")
            bare.close()
            assert bare.closed
            during = {fd: fd_target(fd) for fd in fds}
            take_numbers(fds, opened, tmp_path, b"not an answer\n" * 8)
            stepper.join(START)
            assert not stepper.is_alive()
            assert during == before, f"the pipes were closed under the waiting step: {during} (were {before})"
            read = {fd: os.lseek(fd, 0, os.SEEK_CUR) for fd in opened if os.lseek(fd, 0, os.SEEK_CUR)}
            assert not read, f"the step read files opened after the close: {read}"
            # (Its answer came after the close: it is still given, or the step says the session was closed.)
            assert outcome.get("event") or isinstance(outcome.get("error"), CallOrderError), outcome
            wait_for(lambda: channel.closed, 5.0, "the pipes to be closed as the step ended")
        finally:
            stepper.join(START)
            for fd in opened:
                os.close(fd)
